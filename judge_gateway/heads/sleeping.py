"""A colocated head's sleep and wake inside its worker process (the worker runs them in order with
its batches, heads/worker.py: work sent before a sleep is answered before it; the gateway sends
no work between a sleep and its wake, residency/unit.py).

How a head sleeps, by its device and the residency level (config/residency.py):

- `offload` (level 1 on cuda / mps): every parameter and buffer of the head's torch modules
  (`HeadModel.weight_modules`) is copied into pinned host memory and the device's cache allocator
  gives its blocks back (`torch.cuda.empty_cache`); the head's other device tensors (the CLIP
  family's cached text rows) go with them. A wake copies them back, bit for bit, so the first
  batch after it scores exactly as a resident head. Facts: `torch.cuda.mem_get_info` before and
  after, the bytes moved, the seconds.
- `reload` (level 2, and always on the CPU, where host memory *is* the device's memory and an
  offload frees nothing): the head drops its model (`HeadModel.release_weights`), the heap is
  trimmed (malloc_trim) so the process's RSS falls by about the weights' size, and a wake loads
  them again from the same files with the same loader (`reload_weights`): bit-identical weights,
  as a second load of a resident head gives. Facts: the process's RSS before and after.
- a head with neither (no in-place reload, nothing on a device): `HeadModel.sleep_methods` says
  "exit" and the gateway stops the worker process instead (its supervisor starts a fresh one at
  the wake: the same loader, the same files).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import time
import weakref
from typing import Any

from .models.base import HeadModel

_STATUS_KEYS = {"VmRSS:": "rss", "RssAnon:": "rss_anon", "RssFile:": "rss_file"}


def resident(when: str) -> dict[str, int]:
    """This process's resident set, in bytes, from Linux's /proc/self/status (none elsewhere):
    `rss_<when>`, and its parts `rss_anon_<when>` (the heap: a model loaded by copy) and
    `rss_file_<when>` (mapped files: a safetensors model that transformers maps)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                fields = line.split()  # "VmRSS:", "123456", "kB"
                if fields and fields[0] in _STATUS_KEYS:
                    out[f"{_STATUS_KEYS[fields[0]]}_{when}"] = int(fields[1]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return out


def trim_heap() -> bool:
    """Give glibc's free heap pages back to the OS (a dropped model's tensors sit there otherwise)."""
    try:
        return bool(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return False


def tensors_bytes(modules: list[Any]) -> int:
    """Bytes of the distinct parameters and buffers of `modules`."""
    seen: dict[int, int] = {}
    for module in modules:
        for t in [*module.parameters(), *module.buffers()]:
            seen.setdefault(id(t), t.numel() * t.element_size())
    return sum(seen.values())


def sleep_method(head: HeadModel, level: int) -> str:
    """`offload`, `reload` or `exit` (see the module's docstring)."""
    return head.sleep_methods()[0 if level == 1 else 1]


class _Moved:
    """Where each moved tensor went, so tied parameters and shared buffers stay shared."""

    def __init__(self, to: Any, pinned: bool) -> None:
        self.to, self.pinned, self.done = to, pinned, {}

    def __call__(self, t: Any) -> Any:
        key = id(t)
        if key not in self.done:
            if self.pinned:
                import torch

                host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
                host.copy_(t, non_blocking=True)
                self.done[key] = host
            else:
                self.done[key] = t.to(self.to, non_blocking=True)
        return self.done[key]


def move_modules(modules: list[Any], to: Any, pinned: bool) -> None:
    """Every parameter's data and every buffer of `modules` moved `to` a device (in place: the
    Parameter objects stay, only their storage moves)."""
    move = _Moved(to, pinned)
    for module in modules:
        for p in module.parameters():
            p.data = move(p.data)
        for sub in module.modules():
            for name, b in list(sub._buffers.items()):
                if b is not None:
                    sub._buffers[name] = move(b)


class _Device:
    """The head's accelerator, for the facts and the cache (no-ops on the CPU)."""

    def __init__(self, name: str) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(name)

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)
        elif self.device.type == "mps":
            self.torch.mps.synchronize()

    def free_cache(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()
        elif self.device.type == "mps":
            self.torch.mps.empty_cache()

    def memory(self) -> dict[str, int]:
        """`torch.cuda.mem_get_info` (free, total) and what this process's allocator holds."""
        if self.device.type != "cuda":
            return {}
        free, total = self.torch.cuda.mem_get_info(self.device)
        return {"device_free": int(free), "device_total": int(total),
                "device_allocated": int(self.torch.cuda.memory_allocated(self.device)),
                "device_reserved": int(self.torch.cuda.memory_reserved(self.device))}


class HeadSleeper:
    """The worker's side of a colocated head: sleep(level), wake(). Not thread-safe: the worker's
    main thread calls it between batches."""

    def __init__(self, head: HeadModel) -> None:
        self.head = head
        self.method: str | None = None  # how it sleeps now; None while awake

    @property
    def asleep(self) -> bool:
        return self.method is not None

    def sleep(self, level: int) -> dict[str, Any]:
        if self.method is not None:
            return {"method": self.method, "already": True}
        method = sleep_method(self.head, level)
        if method == "exit":
            raise RuntimeError(f"{self.head.kind} sleeps by its worker exiting (the gateway stops it)")
        started = time.perf_counter()
        modules = self.head.weight_modules()
        facts: dict[str, Any] = {"method": method, "level": level, "weights_bytes": tensors_bytes(modules),
                                 **resident("before")}
        device = _Device(self.head.options.device)
        device.sync()
        facts |= _prefixed(device.memory(), "before")
        if method == "offload":
            del modules
            move_modules(self.head.weight_modules(), "cpu", pinned=device.device.type == "cuda")
            self.head.device_tensors_to("cpu")
            device.sync()  # the copies out have landed before the device blocks are given back
        else:
            dropped = [weakref.ref(m) for m in modules]
            del modules
            self.head.release_weights()
            # Reference counting frees a model (measured: ~1 ms); a full collection walks every object
            # of a torch process (~1 s here), so it runs only when something still holds the model.
            if any(ref() is not None for ref in dropped):
                gc.collect()
        device.free_cache()
        trim_heap()
        facts |= _prefixed(device.memory(), "after") | resident("after") | {
            "seconds": round(time.perf_counter() - started, 4)}
        self.method = method
        return facts

    def wake(self) -> dict[str, Any]:
        method = self.method
        if method is None:
            return {"already": True}
        started = time.perf_counter()
        device = _Device(self.head.options.device)
        facts: dict[str, Any] = {"method": method, **resident("before")}
        if method == "offload":
            move_modules(self.head.weight_modules(), device.device, pinned=False)
            self.head.device_tensors_to(device.device)
            device.sync()  # the pinned host copies are freed as their last reference goes
        else:
            self.head.reload_weights()
            device.sync()
        self.method = None
        facts |= _prefixed(device.memory(), "after") | resident("after") | {
            "weights_bytes": tensors_bytes(self.head.weight_modules()), "seconds": round(time.perf_counter() - started, 4)}
        return facts


def _prefixed(memory: dict[str, int], when: str) -> dict[str, int]:
    return {f"{k}_{when}": v for k, v in memory.items()}
