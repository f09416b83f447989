"""Waiting for a service started in a subprocess: its /healthz answering 200."""

from __future__ import annotations

import subprocess
import time

import httpx


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float, poll_s: float = 0.1,
                 path: str = "/healthz") -> None:
    """Return once `url` + `path` (a gateway's /healthz; vLLM's is /health) answers 200; raise if
    `proc` exits first (with its output when it was piped) or the service has not answered within
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}{path}", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise RuntimeError(f"the service exited with {proc.returncode} before answering {path}\n{out}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the service did not answer {url}{path} within {timeout_s:g} s")
        time.sleep(poll_s)
