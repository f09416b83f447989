"""Torch worker process: loads torch-saved tensors (weights_only=True), decodes Wan VAE latents, and
decodes encoded videos on the device (NVDEC where torchcodec and a CUDA device are there).

Runs as a script under an interpreter that has torch (+ diffusers to decode), so the gateway's
own environment needs neither. That interpreter cannot import the judge_gateway package, so the
one thing this script takes from it, the frame format (workers/framing.py, stdlib only), is
loaded by its path.

Frames on stdin/stdout as every worker speaks them (workers/framing.py); the supervisor's
handshake first: {"op": "init"} -> {"op": "ready", "info": {}} (torch is imported at the first
request, not here). Every request carries an "id" that its reply repeats. Requests:
  {"op": "ping"}
  {"op": "load_torch"}           payload: torch.save bytes  -> npy of the tensor (bf16 -> float32)
  {"op": "decode", "decoder", "channels", "checkpoint", "subfolder", "device", "dtype", "batch_size",
   "denormalize", "mean_std": null | {"images": file, "video": file}, "to_uint8": "truncate" | "round",
   "frames": null | [[index, ...] per sample], "size": null | [width, height]}
                                 payload: npy float32 [B,C,T,H,W] -> npy uint8 [B,3,T',H',W'], or with
                                 "frames" / "size" only those frames of each sample at that size,
                                 [B,3,n,h,w]: sampled and resized on the device right after the decode
  {"op": "decode_video", "device", "decoder": "auto" | "torchcodec" | "pyav", "container", "frames": [index, ...],
   "size": [width, height], "source": [frames, width, height], "max_pixels"}
                                 payload: an encoded video (the gateway validated it: container, codec, size and
                                 frame count) -> npy uint8 [n, h, w, 3]: those source frames, decoded (NVDEC through
                                 torchcodec on a CUDA device, else PyAV on this process's CPU) and resized on the
                                 device by antialiased bicubic; reply {"decoder": what decoded}
  {"op": "shutdown"}             exit (so does the end of stdin)
Replies: {"id", "ok": true, ...} + payload, or {"id", "ok": false, "error": "...", "stage": "load" | null}
+ empty payload ("load": the VAE or its statistics could not be loaded).

Checkpoints and statistics files may be hub ids (`repo_id` / `repo_id/filename`): fetched on first
use by huggingface_hub, which honours HF_HUB_OFFLINE.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

_VAES: dict[tuple, Any] = {}
_STATS: dict[tuple, Any] = {}


class LoadError(RuntimeError):
    """The VAE or its statistics could not be loaded (reported with stage "load")."""


def _framing() -> ModuleType:
    if __package__:  # imported as judge_gateway.latent_worker (the gateway's own tests)
        from .workers import framing

        return framing
    spec = importlib.util.spec_from_file_location(
        "judge_gateway_worker_framing", Path(__file__).resolve().parent / "workers" / "framing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


framing = _framing()


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
        try:
            vae = AutoencoderKLWan.from_pretrained(h["checkpoint"], torch_dtype=getattr(torch, h["dtype"]), **kwargs)
        except Exception as err:  # noqa: BLE001 - missing dir, offline hub, bad files: all a load failure
            hint = ""
            if not os.path.isdir(h["checkpoint"]):
                hint = (" (not a local directory: as a hub id it downloads on first use"
                        + (", and HF_HUB_OFFLINE is set here)" if os.environ.get("HF_HUB_OFFLINE") else ")"))
            raise LoadError(f"cannot load AutoencoderKLWan {h['checkpoint']!r}: {type(err).__name__}: {err}{hint}") from None
        if vae.config.z_dim != int(h["channels"]):
            raise LoadError(f"{h['checkpoint']!r} has z_dim {vae.config.z_dim}, but it is configured as the "
                            f"{h['decoder']} decoder of {h['channels']}-channel latents")
        _VAES[key] = vae.to(h["device"]).eval()
    return _VAES[key]


def _file(spec: str) -> str:
    """A local file, or `repo_id/filename` fetched from the hub."""
    if os.path.isfile(spec):
        return spec
    parts = spec.split("/")
    if len(parts) < 3 or spec.startswith((".", "/")):
        raise LoadError(f"{spec!r} is neither a file nor `repo_id/filename`")
    from huggingface_hub import hf_hub_download

    return hf_hub_download("/".join(parts[:2]), "/".join(parts[2:]))


def _mean_std(spec: str, channels: int, video: bool) -> tuple[Any, Any]:
    """cosmos-rl's load_mean_std statistics: a torch-saved (mean, std) pair, as [1,C,1,1,1]
    (images) or [1,C,T_max,1,1] (videos)."""
    import torch

    key = (spec, channels, video)
    if key not in _STATS:
        try:
            pair = torch.load(_file(spec), map_location="cpu", weights_only=True)
            mean, std = (torch.as_tensor(t, dtype=torch.float32) for t in pair)
        except LoadError:
            raise
        except Exception as err:  # noqa: BLE001
            raise LoadError(f"cannot load (mean, std) from {spec!r}: {type(err).__name__}: {err}") from None
        if mean.numel() != std.numel() or mean.numel() % channels or (not video and mean.numel() != channels):
            raise LoadError(f"{spec!r}: mean/std of {mean.numel()}/{std.numel()} values do not fit {channels} channels"
                            + ("" if video else " (images: one value per channel)"))
        _STATS[key] = (mean.reshape(1, channels, -1, 1, 1), std.reshape(1, channels, -1, 1, 1))
    return _STATS[key]


def _undo_dataset_norm(z: Any, h: dict[str, Any]) -> Any:
    """Undo the trainer's extra normalisation (cosmos-rl Wan2pt1VAEInterface with load_mean_std):
    z * std + mean, the image statistics for one latent frame, else the video statistics of the
    first T latent frames."""
    frames = z.shape[2]
    if frames == 1:
        mean, std = _mean_std(h["mean_std"]["images"], z.shape[1], video=False)
    else:
        mean, std = _mean_std(h["mean_std"]["video"], z.shape[1], video=True)
        if frames > mean.shape[2]:
            raise ValueError(f"latents have {frames} frames but the video statistics cover {mean.shape[2]}")
        mean, std = mean[:, :, :frames], std[:, :, :frames]
    return z * std + mean


def sample_and_resize(x: Any, frames: list[list[int]] | None, size: list[int] | None, to_uint8: str | None) -> Any:
    """Decoded pixels in [-1, 1], [b,3,T,H,W] on the device -> uint8 [b,3,n,h,w]: each sample's
    `frames` (all when None), resized to `size` (width, height) by antialiased bicubic, as Qwen-VL's
    processor (and PIL) resize, then cosmos-rl's ((x.clamp(-1,1)+1)/2*255) cast (truncated, or
    rounded with to_uint8 = "round"). Only these frames leave the device."""
    import torch
    import torch.nn.functional as F

    if frames is not None:
        if len(frames) != x.shape[0] or len({len(f) for f in frames}) != 1:
            raise ValueError(f"frames must list the same number of indices for each of the {x.shape[0]} samples")
        for f in frames:
            if not f or min(f) < 0 or max(f) >= x.shape[2]:
                raise ValueError(f"frame indices {f[:3]}... out of range for {x.shape[2]} decoded frames")
        x = torch.stack([x[i][:, torch.tensor(f, device=x.device)] for i, f in enumerate(frames)])
    x = (x.float().clamp(-1, 1) + 1) / 2 * 255
    if size is not None and (size[1], size[0]) != tuple(x.shape[-2:]):
        b, c, n, height, width = x.shape
        flat = x.permute(0, 2, 1, 3, 4).reshape(b * n, c, height, width)
        flat = F.interpolate(flat, size=(int(size[1]), int(size[0])), mode="bicubic", antialias=True,
                             align_corners=False).clamp(0, 255)
        x = flat.reshape(b, n, c, int(size[1]), int(size[0])).permute(0, 2, 1, 3, 4)
    if to_uint8 == "round":
        x = x.round()
    return x.to(torch.uint8)  # the cast truncates, as cosmos-rl's DecodeHandler.decode_video does


def decode(h: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    import numpy as np
    import torch

    vae = _vae(h)
    lat = np.load(io.BytesIO(payload), allow_pickle=False)
    if lat.shape[1] != vae.config.z_dim:
        raise ValueError(f"latents have {lat.shape[1]} channels but the VAE's z_dim is {vae.config.z_dim}")
    dtype = getattr(torch, h["dtype"])
    channels = vae.config.z_dim
    if h.get("mean_std"):  # load the statistics before decoding anything: a bad file is a load failure
        _mean_std(h["mean_std"]["images"], channels, video=False)
        _mean_std(h["mean_std"]["video"], channels, video=True)
    mean = std = None
    if h.get("denormalize", True):
        mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
        std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    outs = []
    frames = h.get("frames")
    with torch.inference_mode():
        for i in range(0, lat.shape[0], int(h["batch_size"])):
            z = torch.from_numpy(lat[i: i + int(h["batch_size"])]).float()
            if h.get("mean_std"):
                z = _undo_dataset_norm(z, h)
            if mean is not None:
                z = z * std + mean  # the Wan pipeline's latents / (1/std) + mean
            x = vae.decode(z.to(h["device"], dtype), return_dict=False)[0]
            chunk = frames[i: i + int(h["batch_size"])] if frames is not None else None
            outs.append(sample_and_resize(x, chunk, h.get("size"), h.get("to_uint8")).cpu().numpy())
    pixels = np.concatenate(outs, axis=0)
    return {"shape": list(pixels.shape)}, _npy(pixels)


# The demuxers a decode_video payload may open (the gateway's container allow-list, media/container.py).
_DEMUXERS = {"mp4": "mov", "mov": "mov", "webm": "matroska", "matroska": "matroska", "avi": "avi"}


def _torchcodec_frames(payload: bytes, frames: list[int], device: str) -> Any:
    """uint8 [n, 3, H, W] on `device`, by torchcodec (NVDEC on a CUDA device)."""
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(payload, device=device, seek_mode="exact")
    return decoder.get_frames_at(indices=frames).data


def _pyav_frames(payload: bytes, h: dict[str, Any]) -> Any:
    """uint8 [n, 3, H, W] on the CPU, by PyAV under the gateway's allow-list: the sniffed demuxer
    only, no protocol beyond the buffer, frames no larger than max_pixels; every frame up to the
    last one kept is checked against the validated size and count."""
    import av
    import numpy as np
    import torch

    frames, (count, width, height) = h["frames"], h["source"]
    wanted, last = set(frames), max(frames)
    kept: dict[int, Any] = {}
    options = {"protocol_whitelist": "none", "format_whitelist": "mov,matroska,avi"}
    with av.open(io.BytesIO(payload), mode="r", format=_DEMUXERS[h["container"]], container_options=options) as c:
        stream = c.streams.video[0]
        stream.codec_context.options = {"max_pixels": str(int(h["max_pixels"]))}
        for n, frame in enumerate(c.decode(stream)):
            if (frame.width, frame.height) != (width, height) or n >= count:
                raise ValueError(f"frame {n} ({frame.width}x{frame.height}) is not what the gateway validated "
                                 f"({count} frames of {width}x{height})")
            if n in wanted:
                kept[n] = frame.to_ndarray(format="rgb24")
            if n >= last:
                break
    missing = [i for i in frames if i not in kept]
    if missing:
        raise ValueError(f"the video decoded to fewer frames than frame {missing[0]}")
    return torch.from_numpy(np.stack([kept[i] for i in frames])).permute(0, 3, 1, 2)


def decode_video(h: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    """The kept frames of an encoded video, decoded and resized on the device (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    device, decoder = str(h["device"]), h.get("decoder", "auto")
    if decoder == "auto":
        decoder = "torchcodec" if device.startswith("cuda") and importlib.util.find_spec("torchcodec") else "pyav"
    with torch.inference_mode():
        if decoder == "torchcodec":
            x = _torchcodec_frames(payload, list(h["frames"]), device)
            used = f"torchcodec on {device}"
        else:
            x = _pyav_frames(payload, h).to(device)
            used = "pyav on the CPU"
        width, height = (int(v) for v in h["size"])
        if x.shape[0] != len(h["frames"]) or tuple(x.shape[2:]) != (int(h["source"][2]), int(h["source"][1])):
            raise ValueError(f"{decoder} gave frames {list(x.shape)}, not {len(h['frames'])} of the validated size")
        if (height, width) != tuple(x.shape[2:]):
            # antialiased bicubic, as Qwen-VL's processor and PIL resize (sample_and_resize's kernel)
            x = F.interpolate(x.float(), size=(height, width), mode="bicubic", antialias=True,
                              align_corners=False).clamp(0, 255).round()
        pixels = x.to(torch.uint8).permute(0, 2, 3, 1).contiguous().cpu().numpy()
    return {"decoder": used, "shape": list(pixels.shape)}, _npy(pixels)


def _answer(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    op = header.get("op")
    if op == "ping":
        import torch

        return {"torch": torch.__version__}, b""
    if op == "load_torch":
        return load_torch(payload)
    if op == "decode":
        return decode(header, payload)
    if op == "decode_video":
        return decode_video(header, payload)
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # library prints must not corrupt the frame stream
    while True:
        frame = framing.read_frame(stdin, framing.MAX_LATENT_PAYLOAD_BYTES)
        if frame is None:
            return
        header, payload = frame
        op = header.get("op")
        if op == "init":
            framing.write_frame(stdout, {"op": "ready", "info": {}})
            continue
        if op == "shutdown":
            return
        msg_id = header.get("id")
        try:
            reply, out = _answer(header, payload)
            framing.write_frame(stdout, {"id": msg_id, "ok": True, **reply}, out)
        except LoadError as err:
            framing.write_frame(stdout, {"id": msg_id, "ok": False, "error": str(err), "stage": "load"})
        except Exception as err:  # noqa: BLE001 - one bad request must not end the worker
            framing.write_frame(stdout, {"id": msg_id, "ok": False, "error": f"{type(err).__name__}: {err}"})


if __name__ == "__main__":
    main()
