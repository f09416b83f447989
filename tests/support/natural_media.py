"""Natural-looking test content for fidelity tests: the photo matplotlib ships (grace_hopper.jpg),
colour gradients and rendered text, as clips panning a few pixels a frame or as image sets (and
noise: the worst case for a resampler or a codec, and nothing like what a generator makes).
numpy + PIL only (matplotlib only for the photo's path), so any worker venv can run it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont


def photo_path() -> Path:
    """A photograph that ships with an installed package (matplotlib's sample data)."""
    import matplotlib

    path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


def photo() -> Image.Image:
    return Image.open(photo_path()).convert("RGB")


def natural_frames(n: int, width: int, height: int) -> np.ndarray:
    """uint8 [n, height, width, 3]: the photo on the left half, a gradient with white and black
    text of several sizes on the right, shifted 4 pixels a frame."""
    half = width // 2
    canvas = Image.new("RGB", (width, height))
    canvas.paste(photo().resize((half, height), Image.Resampling.BICUBIC), (0, 0))
    yy, xx = np.mgrid[0:height, 0:width - half]
    gradient = np.stack([xx * 255 / (width - half), yy * 255 / height, (xx + yy) * 128 / (width - half + height)], -1)
    canvas.paste(Image.fromarray(gradient.astype(np.uint8)), (half, 0))
    draw = ImageDraw.Draw(canvas)
    big = max(10, height // 18)
    for i, line in enumerate(["The quick brown fox", "jumps over 12,345", "lazy dogs: 40 dB?"]):
        draw.text((half + big, big + i * 2 * big), line, fill=(255, 255, 255), font=ImageFont.load_default(size=big))
    draw.text((half + big, height * 2 // 3), "small text 0123456789", fill=(0, 0, 0),
              font=ImageFont.load_default(size=max(8, big // 2)))
    base = np.asarray(canvas)
    return np.stack([np.roll(base, 4 * i, axis=1) for i in range(n)])


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 arrays, in dB (inf when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def gradients() -> list[np.ndarray]:
    out = []
    for h, w in ((512, 512), (480, 640), (700, 300)):
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        r = 255 * x / (w - 1)
        g = 255 * y / (h - 1)
        b = 255 * (0.5 + 0.5 * np.sin(np.hypot(x - w / 2, y - h / 2) / 40.0))
        out.append(np.stack([r, g, b], -1).round().astype(np.uint8))
    return out


def rendered_text() -> list[np.ndarray]:
    out = []
    for text, size, fg, bg in (("Hello World", (512, 256), "black", "white"),
                               ("GRPO 2026", (640, 640), (250, 220, 40), (20, 30, 90))):
        im = Image.new("RGB", size, bg)
        ImageDraw.Draw(im).text((30, size[1] // 2 - 40), text, fill=fg, font=ImageFont.load_default(size=72))
        out.append(np.asarray(im))
    return out


def photos(paths: list[str]) -> list[np.ndarray]:
    out = []
    for p in paths:
        arr = np.asarray(Image.open(p).convert("RGB"))
        out += [arr, arr[: arr.shape[0] // 5, : arr.shape[1] // 6].copy()]  # the crop is upscaled
    return out


def noise() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((512, 512), (384, 640))]


def h264_clip(frames: np.ndarray, fps: int, crf: int = 18, *, pix_fmt: str = "yuv420p",
              x264_params: str | None = None) -> bytes:
    """An mp4 of `frames` by x264 (preset veryfast, its default GOP: one key frame for a short clip);
    `x264_params` tags the stream, e.g. "colormatrix=bt709". PyAV is imported here only: the rest
    of this module needs numpy and PIL alone."""
    import io

    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], pix_fmt
        stream.options = {"crf": str(crf), "preset": "veryfast", **({"x264-params": x264_params} if x264_params else {})}
        for i, f in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(f, format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()
