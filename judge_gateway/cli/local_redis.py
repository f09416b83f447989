"""The Redis a cosmos-rl rewards.toml names (`redis_host`, `redis_port`): used when it answers,
started when it is local and not running (cosmos-rl's reward service starts its own redis-server
on every launch, so a rewards.toml may name a Redis nobody runs yet), refused
with the reason otherwise.

A Redis started here is a child of `serve`, stopped with it (on Linux also when `serve` dies
without running its clean-up: uvicorn re-raises SIGTERM after its shutdown, which ends the
process before any `finally`; the kernel's parent-death signal covers that and SIGKILL): bound to 127.0.0.1, with an
append-only file in ./run/redis-PORT (so results outlive a restart of Redis) and
`maxmemory-policy noeviction` (an evicted queue entry is lost work).
"""

from __future__ import annotations

import shutil
import signal
import socket
import sys
import subprocess
import time
from pathlib import Path

from ..config import is_loopback
from ..exceptions import Unavailable

START_TIMEOUT_S = 15.0


class RedisUnavailable(Unavailable):
    """The named Redis does not answer and cannot be started here; the message says what to do."""


def probe(host: str, port: int, timeout_s: float = 2.0) -> str:
    """"redis" (it answered PING, or asked for a password), "closed" (nothing listens) or what
    else happened, as the rest of a sentence ("unreachable (...)", "not Redis (...)")."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            reply = sock.recv(64)
    except ConnectionRefusedError:
        return "closed"
    except OSError as err:
        return f"unreachable ({err.strerror or err})"
    if reply.startswith((b"+PONG", b"-NOAUTH", b"-ERR AUTH", b"-DENIED")):
        return "redis"
    return f"not Redis (it answered {reply[:30]!r})"


def ensure_redis(host: str, port: int, run_dir: Path = Path("run")) -> subprocess.Popen[bytes] | None:
    """None when a Redis answers at host:port; the started redis-server when it was local and
    not running. RedisUnavailable otherwise."""
    state = probe(host, port)
    if state == "redis":
        return None
    where = f"{host}:{port}"
    if state != "closed" or not (is_loopback(host) or host in ("0.0.0.0", "::")):
        state = "not answering (connection refused)" if state == "closed" else state
        raise RedisUnavailable(f"the rewards.toml names Redis at {where}, which is {state}; start it there "
                               "(cosmos-rl-reward-redis --port PORT, or redis-server) or fix redis_host / redis_port")
    exe = shutil.which("redis-server")
    if exe is None:
        raise RedisUnavailable(f"no Redis answers at {where} and redis-server is not installed to start one "
                               "(apt-get install redis-server; cosmos-rl's launcher needs it too); or start Redis there")
    data = (run_dir / f"redis-{port}").resolve()
    data.mkdir(parents=True, exist_ok=True)
    cmd = [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--appendonly", "yes",
           "--appendfsync", "everysec", "--save", "", "--maxmemory-policy", "noeviction",
           "--logfile", str(data / "redis.log")]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=_terminate_with_parent if sys.platform == "linux" else None)
    deadline = time.monotonic() + START_TIMEOUT_S
    while probe("127.0.0.1", port, timeout_s=0.5) != "redis":
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RedisUnavailable(f"redis-server did not start on port {port} (see {data / 'redis.log'})")
        time.sleep(0.1)
    return proc


def _terminate_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it exits, however it exits."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
