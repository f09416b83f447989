"""Torch worker process: loads torch-saved tensors (weights_only=True) and decodes Wan VAE latents.

Runs as a script under an interpreter that has torch (+ diffusers to decode), so the gateway's
own environment needs neither. Imports nothing from judge_gateway.

Framing on stdin/stdout, both ways: 4-byte big-endian header length, UTF-8 JSON header,
8-byte big-endian payload length, payload bytes. Requests:
  {"op": "ping"}
  {"op": "load_torch"}           payload: torch.save bytes  -> npy of the tensor (bf16 -> float32)
  {"op": "decode", "checkpoint", "subfolder", "device", "dtype", "batch_size", "denormalize"}
                                 payload: npy float32 [B,C,T,H,W] -> npy uint8 [B,3,T',H',W']
Replies: {"ok": true, ...} + payload, or {"ok": false, "error": "..."} + empty payload.
"""

from __future__ import annotations

import io
import json
import struct
import sys
import zipfile
from typing import Any, BinaryIO

_VAES: dict[tuple, Any] = {}


def read_frame(stream: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    raw = stream.read(4)
    if len(raw) < 4:
        return None
    (hlen,) = struct.unpack(">I", raw)
    header = json.loads(stream.read(hlen).decode("utf-8"))
    (plen,) = struct.unpack(">Q", stream.read(8))
    payload = stream.read(plen) if plen else b""
    return header, payload


def write_frame(stream: BinaryIO, header: dict[str, Any], payload: bytes = b"") -> None:
    h = json.dumps(header).encode("utf-8")
    stream.write(struct.pack(">I", len(h)) + h + struct.pack(">Q", len(payload)))
    stream.write(payload)
    stream.flush()


def _npy(arr: Any) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


# A single tensor's pickle is a few hundred bytes; more means the payload is not one tensor.
MAX_PICKLE_BYTES = 1 << 20
MAX_ARCHIVE_MEMBERS = 64


def check_torch_zip(payload: bytes) -> None:
    """Refuse an archive torch.load would inflate past its own size, from the zip directory alone.

    torch.save stores every member uncompressed; a deflated member (a 1 MB zip can hold a 1 GiB
    data.pkl) is refused before torch reads it, as are members larger than the payload."""
    try:
        members = zipfile.ZipFile(io.BytesIO(payload)).infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as err:
        raise ValueError(f"not a torch zip archive: {err}") from None
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise ValueError(f"torch archive has {len(members)} members (at most {MAX_ARCHIVE_MEMBERS} for one tensor)")
    total = 0
    for m in members:
        if m.compress_type != zipfile.ZIP_STORED:
            raise ValueError(f"torch archive member {m.filename!r} is compressed (method {m.compress_type}); "
                             "torch.save stores members uncompressed")
        if m.file_size != m.compress_size:
            raise ValueError(f"torch archive member {m.filename!r} declares {m.file_size} bytes but stores "
                             f"{m.compress_size}")
        if m.filename.endswith("data.pkl") and m.file_size > MAX_PICKLE_BYTES:
            raise ValueError(f"torch archive's {m.filename!r} is {m.file_size} bytes (at most {MAX_PICKLE_BYTES} "
                             "for one tensor)")
        total += m.file_size
    if total > len(payload):
        raise ValueError(f"torch archive members declare {total} bytes in a {len(payload)}-byte payload")


def load_torch(payload: bytes) -> tuple[dict[str, Any], bytes]:
    import torch

    check_torch_zip(payload)  # before torch reads (and inflates) anything
    obj = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    if not isinstance(obj, torch.Tensor):
        raise TypeError(f"torch payload holds a {type(obj).__name__}, not a single tensor")
    dtype = str(obj.dtype)
    t = obj.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return {"dtype": dtype}, _npy(t.contiguous().numpy())


def _vae(h: dict[str, Any]) -> Any:
    import torch
    from diffusers import AutoencoderKLWan

    key = (h["checkpoint"], h.get("subfolder"), h["device"], h["dtype"])
    if key not in _VAES:
        kwargs = {"subfolder": h["subfolder"]} if h.get("subfolder") else {}
        vae = AutoencoderKLWan.from_pretrained(h["checkpoint"], torch_dtype=getattr(torch, h["dtype"]), **kwargs)
        _VAES[key] = vae.to(h["device"]).eval()
    return _VAES[key]


def decode(h: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    import numpy as np
    import torch

    vae = _vae(h)
    lat = np.load(io.BytesIO(payload), allow_pickle=False)
    if lat.shape[1] != vae.config.z_dim:
        raise ValueError(f"latents have {lat.shape[1]} channels but the VAE's z_dim is {vae.config.z_dim}")
    dtype = getattr(torch, h["dtype"])
    mean = std = None
    if h.get("denormalize", True):
        mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
        std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    outs = []
    with torch.inference_mode():
        for i in range(0, lat.shape[0], int(h["batch_size"])):
            z = torch.from_numpy(lat[i: i + int(h["batch_size"])]).float()
            if mean is not None:
                z = z * std + mean  # the Wan pipeline's latents / (1/std) + mean
            x = vae.decode(z.to(h["device"], dtype), return_dict=False)[0].float().cpu()
            outs.append(((x.clamp(-1, 1) + 1) / 2 * 255).round().to(torch.uint8).numpy())
    pixels = np.concatenate(outs, axis=0)
    return {"shape": list(pixels.shape)}, _npy(pixels)


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # library prints must not corrupt the frame stream
    while True:
        frame = read_frame(stdin)
        if frame is None:
            return
        header, payload = frame
        try:
            op = header.get("op")
            if op == "ping":
                import torch

                reply, out = {"torch": torch.__version__}, b""
            elif op == "load_torch":
                reply, out = load_torch(payload)
            elif op == "decode":
                reply, out = decode(header, payload)
            else:
                raise ValueError(f"unknown op {op!r}")
            write_frame(stdout, {"ok": True, **reply}, out)
        except Exception as err:  # noqa: BLE001 - one bad request must not end the worker
            write_frame(stdout, {"ok": False, "error": f"{type(err).__name__}: {err}"})


if __name__ == "__main__":
    main()
