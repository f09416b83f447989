"""A stdlib-only worker speaking workers/framing.py, for the supervisor's tests:
`python tests/support/fake_framed_worker.py [ok | fatal | exit]`. Like the latent decoder, it
loads the framing module by its path (no judge_gateway import: it starts in a blink).

Handshake: `init` -> `ready` (info: its pid), or `fatal` ("fatal"), or exit 3 before answering
("exit"). Requests ({"op", "id"}): "echo" replies with the payload and its length; "later" does
the same `s` seconds later from a thread of its own, while the worker reads and answers the
requests after it (its reply overtaken by theirs); "sleep" sleeps `s` seconds, then replies (the
worker answers nothing meanwhile); "shout" writes one `n`-byte line to stderr, then replies;
"die" exits with code 7 without replying. "shutdown" or the end of stdin ends it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "framing", Path(__file__).resolve().parents[2] / "judge_gateway" / "workers" / "framing.py")
assert _spec is not None and _spec.loader is not None
framing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(framing)
read_frame = framing.read_frame
_write_lock = threading.Lock()  # "later" replies come from their own threads


def write_frame(stream, header, payload=b""):
    with _write_lock:
        framing.write_frame(stream, header, payload)


def _later(stdout, header, payload):
    time.sleep(float(header["s"]))
    write_frame(stdout, {"id": header["id"], "ok": True, "n": len(payload)}, payload)


def main(mode: str) -> int:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (frame := read_frame(stdin, max_payload=1 << 40)) is not None:
        header, payload = frame
        op = header.get("op")
        if op == "init":
            if mode == "exit":
                print("cannot start: told to", file=sys.stderr, flush=True)
                return 3
            if mode == "fatal":
                write_frame(stdout, {"op": "fatal", "error": "model 'x' not found"})
                return 1
            write_frame(stdout, {"op": "ready", "info": {"pid": os.getpid()}})
        elif op == "shutdown":
            return 0
        elif op == "echo":
            write_frame(stdout, {"id": header["id"], "ok": True, "n": len(payload)}, payload)
        elif op == "later":
            threading.Thread(target=_later, args=(stdout, header, payload), daemon=True).start()
        elif op == "sleep":
            time.sleep(float(header["s"]))
            write_frame(stdout, {"id": header["id"], "ok": True})
        elif op == "shout":
            sys.stderr.write("x" * int(header["n"]) + "\n")
            sys.stderr.flush()
            write_frame(stdout, {"id": header["id"], "ok": True})
        elif op == "die":
            os._exit(7)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "ok"))
