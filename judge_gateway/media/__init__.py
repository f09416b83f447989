"""Media inputs, their validation, and their encoding for VLM judges.

Three layers:

1. `ImageMedia` / `VideoMedia`: what a request carries. Usable as pydantic v2 field types.
   Validation is cheap on purpose (magic bytes + container/image headers, never a full pixel
   decode) because it runs on the request path for every sample; pixels are decoded lazily,
   once, when a judge asks for them.
2. `encode_image` / `encode_video`: turn a medium into a data URL for an OpenAI-compatible chat
   API, parameterised by frozen (hashable) specs `ImageEncoding` / `VideoSampling` so the same
   spec can be a cache key and be reported in a score's details.
3. `MediaCache`: one per gateway request, so each (medium, spec) is encoded once and shared by
   every judge that asks for it, including concurrent ones.

Every decode/encode failure is a `MediaError` (a `ValueError`, so pydantic reports it as a 422
with the field location).

Size budgets (`MediaLimits`): declared sizes (image header, container stream info, array shape)
are checked before any pixel is decoded: pixels per image or frame, frames and decoded pixels
per video, and decoded pixels of all compressed media in one request (`request_limits`, which
the server enters per request; outside it the module defaults apply and nothing is summed).
A video's frames are checked again as they are decoded (`VideoMedia.iter_frames`), and the
decoded pixels of all requests scoring at once are bounded by a process-wide `MediaBudget`.

Modules (each imports its siblings directly, never this face):
`limits` (MediaError, the size budgets and the checks against them), `wire` (data URLs, base64,
magic bytes, the uint8 array object, their JSON Schema pieces), `image` (ImageMedia),
`container` (opening an encoded video under the container / codec allow-list, probing it),
`video` (VideoMedia and its decode loop), `video_schema` (its JSON Schema), `planes` (a decoded
4:2:0 frame's planes resized and converted at a judge's size), `scope` (a request's stop flag for
the threads decoding its media), `budget` (the process-wide decoded-media budget), `sampling`
(which frames and what size a VLM sees), `encode` (encode_image / encode_video), `cache`
(MediaCache).
"""

from __future__ import annotations

# `name as name`: public before the split, though outside __all__ (tests read X264_PRESET).
from .cache import MediaCache
from .encode import X264_PRESET as X264_PRESET
from .encode import (
    EncodedImage,
    EncodedVideo,
    ImageEncoding,
    available_video_encoders,
    encode_image,
    encode_video,
)
from .image import ImageMedia
from .limits import MAX_FPS as MAX_FPS
from .limits import (
    MAX_IMAGE_PIXELS,
    MAX_REQUEST_PIXELS,
    MAX_VIDEO_FRAMES,
    MAX_VIDEO_PIXELS,
    MediaError,
    MediaLimits,
    request_limits,
)
from .limits import current_limits as current_limits
from .limits import request_pixels
from .sampling import VideoSampling, sample_frame_indices
from .sampling import fit_pixels as fit_pixels
from .video import VideoMedia
from .wire import b64decode_any as b64decode_any
from .wire import parse_data_url as parse_data_url
from .wire import sniff_image_format as sniff_image_format

__all__ = [
    "MAX_IMAGE_PIXELS",
    "MAX_REQUEST_PIXELS",
    "MAX_VIDEO_FRAMES",
    "MAX_VIDEO_PIXELS",
    "EncodedImage",
    "EncodedVideo",
    "ImageEncoding",
    "ImageMedia",
    "MediaCache",
    "MediaError",
    "MediaLimits",
    "VideoMedia",
    "VideoSampling",
    "available_video_encoders",
    "encode_image",
    "encode_video",
    "request_limits",
    "request_pixels",
    "sample_frame_indices",
]
