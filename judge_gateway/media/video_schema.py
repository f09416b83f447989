"""The JSON Schema of a video input (the forms `VideoMedia.validate` accepts), for the API's
OpenAPI document."""

from __future__ import annotations

from typing import Any

from .image import _image_json_schema
from .limits import MAX_FPS, MAX_VIDEO_FRAMES, MAX_VIDEO_PIXELS
from .wire import _array_json_schema

_VIDEO_FORMS_DOC = (
    "A video: an object with exactly one of 'frames' (a list of images, all the same size, "
    "each in any image form), 'mp4' (base64 or a data: URL of an mp4/mov, webm/mkv or avi file) or 'array' "
    "(the JSON form of a uint8 array of shape [T, H, W, 3]), plus 'fps' (required for frames "
    "and array; for mp4 it overrides the container's rate). A bare data: URL / base64 string is "
    f"read as 'mp4'. At most {MAX_VIDEO_FRAMES} frames and {MAX_VIDEO_PIXELS} decoded pixels by "
    "default (media.max_video_frames, media.max_video_pixels). URLs and file paths are refused."
)


def _video_json_schema() -> dict[str, Any]:
    fps = {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": MAX_FPS,
        "description": "frames per second",
    }
    mp4 = {"type": "string", "description": "base64 or data:video/mp4;base64,... (mov, webm/mkv, avi too)"}
    return {
        "title": "Video",
        "description": _VIDEO_FORMS_DOC,
        "anyOf": [
            {
                "type": "object",
                "title": "frames",
                "properties": {
                    "frames": {
                        "type": "array",
                        "items": _image_json_schema(),
                        "minItems": 1,
                        "maxItems": MAX_VIDEO_FRAMES,
                    },
                    "fps": fps,
                },
                "required": ["frames", "fps"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "title": "mp4",
                "properties": {"mp4": mp4, "fps": fps},
                "required": ["mp4"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "title": "array",
                "properties": {"array": _array_json_schema("[T, H, W, 3]", 4, 4), "fps": fps},
                "required": ["array", "fps"],
                "additionalProperties": False,
            },
            {
                **mp4,
                "title": "mp4 string",
                "pattern": r"^(data:video/[\w.+-]+;base64,)?[A-Za-z0-9+/_=\s-]+$",
            },
        ],
    }
