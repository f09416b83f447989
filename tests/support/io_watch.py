"""Did this process open a file or bind a socket? Canaries for the hostile-media tests.

- `FileOpens(path)`: inotify (through libc, no tool) reports every open of the canary file, by
  any thread of any process, however short: proof that a demuxer never touched it.
- `PortWatch(ports)`: polls /proc/self/net/udp{,6} in a thread while a request runs and records
  which of the given UDP ports were ever bound (an SDP description makes FFmpeg bind the ports it
  names for as long as it waits for RTP, seconds).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

IN_OPEN = 0x20
IN_ACCESS = 0x01


class FileOpens:
    def __init__(self, path: Path) -> None:
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if self._libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN | IN_ACCESS) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        self.events = 0

    def count(self) -> int:
        """Opens and reads of the file seen so far."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return self.events
            self.events += len(data) // 16  # struct inotify_event without a name: 16 bytes

    def close(self) -> None:
        os.close(self.fd)


def bound_udp_ports() -> set[int]:
    ports = set()
    for table in ("/proc/self/net/udp", "/proc/self/net/udp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            ports.add(int(line.split()[1].rsplit(":", 1)[1], 16))
    return ports


class PortWatch:
    def __init__(self, ports: set[int]) -> None:
        self.ports = ports
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.seen |= self.ports & bound_udp_ports()
            if self._stop.wait(0.01):
                return

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join()
        self.seen |= self.ports & bound_udp_ports()
        return self.seen
