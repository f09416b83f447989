"""cosmos-rl enqueue payloads: `<JSON line>\\n<tensor bytes>`, sniffed and validated.

Never unpickles request bytes: npy loads with allow_pickle=False; torch-saved tensors are handed
(as bytes) to the torch worker, which loads them with weights_only=True.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ...exceptions import InvalidInput
from ...json_body import JSONBodyError, parse_json
from ...media import MediaLimits
from ...schema import MAX_PROMPT_CHARS

NPY_MAGIC = b"\x93NUMPY"
TORCH_ZIP_MAGIC = b"PK\x03\x04"

MediaType = Literal["image", "video", "latent"]
MAX_NPY_DIMS = 8  # every payload is 4-D or 5-D; more dimensions are refused before numpy sees them

# Wan VAE scale factors: T latent frames decode to 4(T-1)+1 frames; H x W latents to 8H x 8W
# pixels for Wan2.1 (16 channels), 16H x 16W for Wan2.2 (48 channels).
WAN_TEMPORAL_SCALE = 4
WAN_SPATIAL_SCALE = {16: 8, 48: 16}


class PayloadError(InvalidInput):
    """A malformed enqueue body; the message is the 400's reason."""


@dataclass
class EnqueueMeta:
    reward_fn: dict[str, float]
    prompts: list[str] | None  # None only while `prompt` (one for every sample) awaits the batch size
    media_type: MediaType
    video_infos: list[dict[str, Any]] | None
    extra: dict[str, Any]
    prompt: str | None = None  # the reward service README's GenEval body: one `prompt` for the batch

    def prompts_for(self, batch: int) -> list[str]:
        """One prompt per sample: `prompts`, or the README's single `prompt` repeated."""
        if self.prompts is not None:
            return self.prompts
        assert self.prompt is not None
        return [self.prompt] * batch


def split_body(body: bytes) -> tuple[dict[str, Any], bytes]:
    """Split at the first newline; the first line must be a JSON object."""
    if not body:
        raise PayloadError("empty body: expected one line of JSON metadata, '\\n', then tensor bytes")
    head, sep, tensor = body.partition(b"\n")
    for magic in (NPY_MAGIC, TORCH_ZIP_MAGIC):
        if magic in head:  # npy headers hold a '\n' of their own: the split landed inside the tensor
            raise PayloadError("no '\\n' between the JSON line and the tensor bytes (tensor magic found in the first line)")
    if not sep:
        raise PayloadError("no '\\n' in the body: expected one line of JSON metadata, '\\n', then tensor bytes")
    try:
        meta = parse_json(head)
    except JSONBodyError as err:
        raise PayloadError(f"the first line is not UTF-8 JSON: {err.reason}") from None
    if not isinstance(meta, dict):
        raise PayloadError(f"the JSON line must be an object, got {type(meta).__name__}")
    if not tensor:
        raise PayloadError("no tensor bytes after the JSON line")
    return meta, tensor


def parse_meta(meta: dict[str, Any]) -> EnqueueMeta:
    rf = meta.get("reward_fn")
    if rf is None:
        raise PayloadError("the JSON line has no `reward_fn` (a {reward_name: weight} object)")
    if not isinstance(rf, dict) or not rf:
        raise PayloadError("`reward_fn` must be a non-empty {reward_name: weight} object")
    weights: dict[str, float] = {}
    for name, w in rf.items():
        if isinstance(w, bool) or not isinstance(w, (int, float)):
            raise PayloadError(f"`reward_fn.{name}` must be a number (the weight), got {w!r}")
        weights[name] = float(w)
    prompts, prompt = meta.get("prompts"), meta.get("prompt")
    if prompts is not None and (not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts)):
        raise PayloadError("`prompts` must be a list of strings")
    if prompts is not None and prompt is not None:
        raise PayloadError("the JSON line has both `prompts` and `prompt`: send `prompts`, one per sample")
    if prompt is not None and not isinstance(prompt, str):
        raise PayloadError("`prompt` must be a string (the prompt of every sample; or send `prompts`, a list)")
    if prompts is None and prompt is None:
        # Every reward handler of cosmos-rl's reward service reads metadata["prompts"]: without it
        # nothing can be scored, so there is no uuid to give (not a pull of fills later).
        raise PayloadError("the JSON line has no `prompts` (a list of strings, one per sample): every cosmos-rl "
                           "reward scores a sample against its prompt")
    mt = meta.get("media_type")
    # without a media_type, cosmos-rl's reward service decodes the bytes as latents
    media_type: MediaType = mt if mt in ("image", "video") else "latent"
    infos = meta.get("video_infos")
    if infos is not None and (not isinstance(infos, list) or not all(isinstance(i, dict) for i in infos)):
        raise PayloadError("`video_infos` must be a list of objects, one per sample")
    extra = {k: v for k, v in meta.items()
             if k not in ("reward_fn", "prompts", "prompt", "media_type", "video_infos")}
    return EnqueueMeta(weights, prompts, media_type, infos, extra, prompt)


def sniff(data: bytes) -> Literal["npy", "torch"]:
    if data.startswith(NPY_MAGIC):
        return "npy"
    if data.startswith(TORCH_ZIP_MAGIC):
        return "torch"
    raise PayloadError(
        f"tensor bytes are neither npy (\\x93NUMPY) nor a torch zip (PK\\x03\\x04); they start with {data[:8]!r}"
    )


def read_npy_header(data: bytes) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """(shape, dtype, fortran_order, data offset) from the header alone; the declared size must be
    exactly the bytes that follow, so nothing larger than the body is ever allocated."""
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported npy version {version}")
    except Exception as err:  # noqa: BLE001 - corrupt headers raise many kinds; all are bad input
        raise PayloadError(f"npy header unreadable: {type(err).__name__}: {err}") from None
    if dtype.hasobject:
        raise PayloadError("npy payload refused: it holds Python objects (pickles); send a numeric array")
    if len(shape) > MAX_NPY_DIMS:  # numpy itself stops at 64 (a ValueError deep in reshape)
        raise PayloadError(f"npy header declares {len(shape)} dimensions; a payload has at most {MAX_NPY_DIMS} "
                           "([B,H,W,3] images, [B,3,T,H,W] videos and latents)")
    offset = f.tell()
    declared = math.prod(shape) * dtype.itemsize
    if declared != len(data) - offset:
        raise PayloadError(f"npy header declares shape {list(shape)} of {dtype} = {declared} bytes, "
                           f"but {len(data) - offset} bytes follow it")
    return tuple(int(d) for d in shape), dtype, bool(fortran), offset


def load_npy(data: bytes) -> np.ndarray:
    """The array, viewing the body's bytes (no copy) once the header checks out."""
    shape, dtype, fortran, offset = read_npy_header(data)
    arr = np.frombuffer(data, dtype=dtype, count=math.prod(shape), offset=offset)
    return arr.reshape(shape, order="F" if fortran else "C")


def bf16_view_to_float32(arr: np.ndarray) -> np.ndarray:
    """uint8 bytes of a bfloat16 tensor (last dim doubled) -> float32."""
    if arr.shape[-1] % 2:
        raise PayloadError(f"uint8 latent view must have an even last dimension (bf16 bytes), got {list(arr.shape)}")
    u16 = np.ascontiguousarray(arr).view("<u2")
    return (u16.astype(np.uint32) << 16).view(np.float32)


def _shape(arr: np.ndarray) -> list[int]:
    return [int(x) for x in arr.shape]


def check_image(arr: np.ndarray) -> np.ndarray:
    """[B,H,W,3] (or [B,3,H,W]) uint8 -> [B,H,W,3]."""
    if arr.dtype != np.uint8:
        raise PayloadError(f"image tensor must be uint8 0-255, got {arr.dtype}")
    if arr.ndim != 4:
        raise PayloadError(f"image tensor must be [B,H,W,3], got shape {_shape(arr)}")
    if arr.shape[3] == 3:
        out = arr
    elif arr.shape[1] == 3:
        out = arr.transpose(0, 2, 3, 1)
    else:
        raise PayloadError(f"image tensor must be [B,H,W,3] (or [B,3,H,W]), got shape {_shape(arr)}")
    if min(out.shape[1], out.shape[2]) < 1:
        raise PayloadError(f"image tensor has an empty side: {_shape(arr)}")
    return out


def check_video(arr: np.ndarray) -> np.ndarray:
    """[B,3,T,H,W] uint8 -> [B,T,H,W,3]."""
    if arr.dtype != np.uint8:
        raise PayloadError(f"video tensor must be uint8 0-255, got {arr.dtype}")
    if arr.ndim != 5 or arr.shape[1] != 3:
        raise PayloadError(f"video tensor must be [B,3,T,H,W], got shape {_shape(arr)}")
    if min(arr.shape[2:]) < 1:
        raise PayloadError(f"video tensor has an empty dimension: {_shape(arr)}")
    return arr.transpose(0, 2, 3, 4, 1)


def check_latent(arr: np.ndarray, *, channels: tuple[int, ...] = (16, 48)) -> np.ndarray:
    """float16/float32 (or a uint8 bf16 view) [B,C,T,H,W] -> float32; C = 16 (Wan2.1) or 48 (Wan2.2)."""
    if arr.dtype == np.uint8:
        arr = bf16_view_to_float32(arr)
    elif arr.dtype in (np.float16, np.float32):
        arr = arr.astype(np.float32)
    else:
        raise PayloadError(f"latent tensor must be float16/bf16 (or its uint8 byte view), got {arr.dtype}")
    if arr.ndim != 5 or arr.shape[1] not in channels:
        raise PayloadError(
            f"latent tensor must be [B,{'|'.join(map(str, channels))},T,H,W] (Wan VAE latents), got shape {_shape(arr)}"
        )
    if not np.isfinite(arr).all():
        raise PayloadError("latent tensor holds NaN or inf")
    return arr


def input_info(arr: np.ndarray, dtype_name: str) -> dict[str, Any]:
    """`input_info` as cosmos-rl's reward service reports it (torch dtypes; here for the tensor as received)."""
    return {"shape": _shape(arr), "dtype": dtype_name,
            "min": f"{float(arr.min()):.3f}", "max": f"{float(arr.max()):.3f}"}


def decoded_video_shape(latent_shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """[B,C,T,H,W] latents -> (B, frames, height, width) of the pixels the Wan VAE decodes."""
    b, c, t, h, w = latent_shape
    scale = WAN_SPATIAL_SCALE.get(c, max(WAN_SPATIAL_SCALE.values()))  # unknown: the larger, never under-count
    return b, WAN_TEMPORAL_SCALE * (t - 1) + 1, scale * h, scale * w


def check_enqueue_limits(batch: int, frames: int, height: int, width: int, prompts: list[str] | None,
                         limits: MediaLimits, what: str) -> None:
    """Every size limit a sample would meet later (media validation, the schema), checked while
    the enqueue can still be refused: `frames` is 1 for images; sizes are of decoded pixels."""
    if height * width > limits.max_image_pixels:
        raise PayloadError(f"{what}: {width}x{height} = {height * width} pixels per frame, above "
                           f"media.max_image_pixels = {limits.max_image_pixels}")
    if frames > limits.max_video_frames:
        raise PayloadError(f"{what}: {frames} frames per video, above media.max_video_frames = "
                           f"{limits.max_video_frames}")
    per_sample = frames * height * width
    if frames > 1 and per_sample > limits.max_video_pixels:
        raise PayloadError(f"{what}: {frames} frames of {width}x{height} = {per_sample} pixels per video, above "
                           f"media.max_video_pixels = {limits.max_video_pixels}")
    if batch * per_sample > limits.max_request_pixels:
        raise PayloadError(f"{what}: {batch} samples of {per_sample} pixels = {batch * per_sample}, above "
                           f"media.max_request_pixels = {limits.max_request_pixels}")
    for i, prompt in enumerate(prompts or []):
        if len(prompt) > MAX_PROMPT_CHARS:
            raise PayloadError(f"prompts[{i}] has {len(prompt)} characters, above the limit of {MAX_PROMPT_CHARS}")
