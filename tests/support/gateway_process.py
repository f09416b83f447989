"""A gateway in its own process (a replica that a test can kill -9):
`python -m tests.support.gateway_process CONFIG.json PORT` serves create_app(Gateway(config)) with
uvicorn on 127.0.0.1:PORT. `GatewayProcess` starts one and waits for /healthz."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.fake_openai import free_port
from tests.support.health import wait_healthy

ROOT = Path(__file__).resolve().parents[2]


class GatewayProcess:
    def __init__(self, config: dict, workdir: Path, name: str) -> None:
        self.port = free_port()
        path = workdir / f"{name}.json"
        path.write_text(json.dumps(config))
        self.log = (workdir / f"{name}.log").open("wb")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.gateway_process", str(path), str(self.port)],
                                     cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(self.url, self.proc, 60)
        except RuntimeError as exc:
            self.kill()
            raise RuntimeError(f"gateway {name}: {exc} (its log: {workdir / (name + '.log')})") from None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """kill -9: no shutdown code runs, as when a node is lost."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def main() -> None:
    import uvicorn

    from judge_gateway.config import validate_config
    from judge_gateway.gateway import Gateway
    from judge_gateway.server import create_app

    config, port = json.loads(Path(sys.argv[1]).read_text()), int(sys.argv[2])
    app = create_app(Gateway(validate_config(config)))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
