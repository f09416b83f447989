"""A real redis-server on a free loopback port, for the Redis result-store tests.

A failed start raises (the tests fail, they do not skip): scripts/test.sh installs redis-server.
`stop()` then `start()` is a Redis outage and restart on the same port; `persist=True` runs it with
AOF (what a deployment needs, see docs/integrations/cosmos-rl.md, "Redis in production"), so a restart keeps its data.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, workdir: Path, *, persist: bool = False, extra: list[str] | None = None) -> None:
        self.exe = shutil.which("redis-server")
        if self.exe is None:
            raise RuntimeError("redis-server is not installed (scripts/test.sh installs it: apt-get install -y redis-server)")
        self.port = _free_port()
        self.workdir = workdir
        self.persist = persist
        self.extra = list(extra or [])  # more redis-server options, after (so over) the persistence ones
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        persistence = (["--appendonly", "yes", "--appendfsync", "always", "--save", ""] if self.persist
                       else ["--save", "", "--appendonly", "no"])
        # Its output goes to a file: a pipe nobody reads fills up and blocks the server.
        self.log_path = self.workdir / f"redis-{self.port}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", *persistence, *self.extra,
                 "--dir", str(self.workdir), "--protected-mode", "yes"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                out = self.log_path.read_text(errors="replace")
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {out[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("redis-server did not answer PING within 15 s")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
