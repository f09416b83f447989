"""VideoAlign (KwaiVGI/VideoReward) checkpoint facts, pure python (no torch): the gateway and the
worker both use it.

A released checkpoint directory holds `model_config.json` (the training run's data, model, LoRA
and inference sections) and `checkpoint-STEP/model.pth` (the PEFT-wrapped reward model's full
state dict: un-merged LoRA, the resized token embeddings, `rm_head`). The base model's config and
processor come from `model_config.model_name_or_path` (Qwen2-VL-2B-Instruct).

Inference semantics (VideoAlign's published inference code, re-implemented here):
  * `data_config.sample_type = "uniform"`: duration x `data_config.fps` frames (or
    `data_config.num_frames`), an even number (temporal patch 2) from 4 to 768, spread evenly over
    the whole clip (Qwen2-VL's smart_nframes + linspace; sample_video_frames);
  * each frame resized to Qwen-VL's smart size under `data_config.max_frame_pixels`;
  * one user turn: the video, then the `prompt_template_type` text with the generation prompt
    (`detailed_special`: three reward tokens <|VQ_reward|> <|MQ_reward|> <|TA_reward|>);
  * `rm_head` reads the last hidden state at the reward tokens (output_dim 3: token i -> output i);
  * VQ/MQ/TA are z-normalised with `inference_config` {VQ,MQ,TA}_{mean,std}; Overall = VQ+MQ+TA.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...exceptions import ConfigurationError

DIMS = ("VQ", "MQ", "TA")
REWARD_TOKENS = ("<|VQ_reward|>", "<|MQ_reward|>", "<|TA_reward|>")
PATCH_FACTOR = 28  # Qwen2-VL patch 14 x spatial merge 2
FRAME_FACTOR = 2  # temporal patch
MIN_FRAMES = 4  # Qwen-VL's fewest frames sampled by fps
MAX_FRAMES = 768  # and most
DEFAULT_MIN_FRAME_PIXELS = 128 * 28 * 28  # Qwen-VL's VIDEO_MIN_PIXELS


class VideoAlignConfigError(ConfigurationError):
    """The checkpoint's model_config.json is missing a fact the scorer needs, or has a bad one."""


@dataclass(frozen=True)
class VideoAlignSpec:
    base_model: str
    fps: float | None
    num_frames: int | None
    max_frame_pixels: int
    min_frame_pixels: int
    prompt_template_type: str
    eval_dim: tuple[str, ...]
    output_dim: int
    reward_token: str
    special_tokens: tuple[str, ...]
    lora_scale: float | None  # alpha / r (or alpha / sqrt(r) with rslora); None: no LoRA
    norm: dict[str, tuple[float, float]] | None  # dim -> (mean, std)

    def sampling(self) -> dict[str, Any]:
        """What the gateway needs to sample frames (sent in the worker's ready info)."""
        return {"fps": self.fps, "num_frames": self.num_frames, "max_frame_pixels": self.max_frame_pixels,
                "min_frame_pixels": self.min_frame_pixels}

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["norm"] = {k: list(v) for k, v in self.norm.items()} if self.norm else None
        return d


def _num(section: dict[str, Any], key: str, where: str, *, positive: bool = True) -> float:
    v = section.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        raise VideoAlignConfigError(f"{where}.{key}: expected a {'positive ' if positive else ''}number, got {v!r}")
    return float(v)


def parse_model_config(cfg: dict[str, Any], *, base_model: str | None = None) -> VideoAlignSpec:
    """Validate model_config.json (as a dict) into the facts the scorer uses."""
    if not isinstance(cfg, dict):
        raise VideoAlignConfigError("model_config.json: expected a JSON object")
    data = cfg.get("data_config")
    model = cfg.get("model_config")
    if not isinstance(data, dict) or not isinstance(model, dict):
        raise VideoAlignConfigError("model_config.json: needs `data_config` and `model_config` sections")
    lora = cfg.get("peft_lora_config") or {}
    inference = cfg.get("inference_config")

    sample_type = data.get("sample_type", "uniform")
    if sample_type != "uniform":
        raise VideoAlignConfigError(f"data_config.sample_type: {sample_type!r} is not supported (only 'uniform')")
    num_frames = data.get("num_frames")
    fps = data.get("fps")
    if num_frames is not None:
        if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1:
            raise VideoAlignConfigError(f"data_config.num_frames: expected a positive int, got {num_frames!r}")
        fps = None  # the published inference code: num_frames wins over fps
    elif fps is None:
        raise VideoAlignConfigError("data_config: needs `fps` (or `num_frames`): the frame rate it was trained at")
    else:
        fps = _num(data, "fps", "data_config")
    max_px = data.get("max_frame_pixels", data.get("max_pixels"))
    if isinstance(max_px, bool) or not isinstance(max_px, int) or max_px < PATCH_FACTOR**2:
        raise VideoAlignConfigError(
            f"data_config.max_frame_pixels: expected an int >= {PATCH_FACTOR ** 2}, got {max_px!r}")
    min_px = data.get("min_frame_pixels", data.get("min_pixels", DEFAULT_MIN_FRAME_PIXELS))
    if isinstance(min_px, bool) or not isinstance(min_px, int) or min_px < 1:
        raise VideoAlignConfigError(f"data_config.min_frame_pixels: expected a positive int, got {min_px!r}")
    min_px = min(min_px, max_px)

    template = data.get("prompt_template_type", "detailed_special")
    if template not in PROMPT_TEMPLATES:
        raise VideoAlignConfigError(
            f"data_config.prompt_template_type: {template!r} is not supported (supported: {', '.join(PROMPT_TEMPLATES)})")
    eval_dim = data.get("eval_dim", list(DIMS))
    eval_dim = (eval_dim,) if isinstance(eval_dim, str) else tuple(eval_dim)
    if eval_dim != DIMS:
        raise VideoAlignConfigError(f"data_config.eval_dim: expected {list(DIMS)}, got {list(eval_dim)}")

    base = base_model or model.get("model_name_or_path")
    if not isinstance(base, str) or not base:
        raise VideoAlignConfigError("model_config.model_name_or_path: the base model (e.g. Qwen/Qwen2-VL-2B-Instruct) is missing")
    reward_token = model.get("reward_token", "special")
    if reward_token != "special" or (template == "detailed_special" and not model.get("use_special_tokens", True)):
        raise VideoAlignConfigError(
            f"model_config.reward_token: only 'special' (the three reward tokens) is supported, got {reward_token!r}")
    output_dim = model.get("output_dim", 3)
    if output_dim not in (1, 3):
        raise VideoAlignConfigError(f"model_config.output_dim: expected 1 or 3, got {output_dim!r}")

    lora_scale = None
    if lora.get("lora_enable", False):
        r = _num(lora, "lora_r", "peft_lora_config")
        alpha = _num(lora, "lora_alpha", "peft_lora_config")
        lora_scale = alpha / math.sqrt(r) if lora.get("use_rslora") else alpha / r

    norm = None
    if inference is not None:
        if not isinstance(inference, dict):
            raise VideoAlignConfigError("inference_config: expected an object of {VQ,MQ,TA}_{mean,std}")
        norm = {d: (_num(inference, f"{d}_mean", "inference_config", positive=False),
                    _num(inference, f"{d}_std", "inference_config")) for d in DIMS}
    return VideoAlignSpec(base_model=base, fps=fps, num_frames=num_frames, max_frame_pixels=max_px,
                          min_frame_pixels=min_px, prompt_template_type=template, eval_dim=eval_dim,
                          output_dim=int(output_dim), reward_token=reward_token, special_tokens=REWARD_TOKENS,
                          lora_scale=lora_scale, norm=norm)


def load_model_config(checkpoint_dir: str | Path, *, base_model: str | None = None) -> VideoAlignSpec:
    path = Path(checkpoint_dir) / "model_config.json"
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        raise VideoAlignConfigError(f"{path}: not found (a VideoAlign checkpoint has model_config.json)") from None
    except json.JSONDecodeError as exc:
        raise VideoAlignConfigError(f"{path}: not JSON ({exc})") from None
    return parse_model_config(cfg, base_model=base_model)


def find_checkpoint(checkpoint_dir: str | Path, step: int | None = None) -> Path:
    """`checkpoint-STEP` inside the directory: the given step, else the highest."""
    root = Path(checkpoint_dir)
    found = {}
    for p in root.glob("checkpoint-*"):
        tail = p.name.split("-", 1)[1]
        if p.is_dir() and tail.isdigit():
            found[int(tail)] = p
    if not found:
        raise VideoAlignConfigError(f"{root}: no checkpoint-STEP directory")
    if step is not None and step >= 0:
        if step not in found:
            raise VideoAlignConfigError(f"{root}: no checkpoint-{step} (have {sorted(found)})")
        return found[step]
    return found[max(found)]


def normalize(raw: dict[str, float], norm: dict[str, tuple[float, float]] | None) -> dict[str, float]:
    """z-normalise VQ/MQ/TA with the checkpoint's statistics; Overall = VQ + MQ + TA."""
    out = {d: (raw[d] - norm[d][0]) / norm[d][1] if norm else raw[d] for d in DIMS}
    out["Overall"] = out["VQ"] + out["MQ"] + out["TA"]
    return out


def smart_frame_size(height: int, width: int, min_pixels: int, max_pixels: int,
                     factor: int = PATCH_FACTOR) -> tuple[int, int]:
    """Qwen-VL's frame size: sides multiples of `factor`, aspect kept, area in [min, max] pixels."""
    if height < 1 or width < 1:
        raise ValueError(f"bad frame size {height}x{width}")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def _round_even(x: float) -> int:
    return round(x / FRAME_FACTOR) * FRAME_FACTOR


def sample_video_frames(num_source_frames: int, source_fps: float, fps: float | None,
                        num_frames: int | None) -> tuple[list[int], float]:
    """Source frame indices and the fps they amount to, by the rule VideoAlign's vision_process
    applies (`sample_type = "uniform"`, Qwen2-VL's smart_nframes): a count of duration x `fps`
    (or `num_frames`), clamped to [MIN_FRAMES, min(MAX_FRAMES, frames)] and rounded to an even
    number (the temporal patch), spread evenly over the whole clip, first and last frame included."""
    from ...media import MediaError

    n = num_source_frames
    duration = n / source_fps
    if num_frames is not None:
        count = _round_even(num_frames)
    else:
        assert fps is not None
        lo = math.ceil(MIN_FRAMES / FRAME_FACTOR) * FRAME_FACTOR
        hi = min(MAX_FRAMES, n) // FRAME_FACTOR * FRAME_FACTOR
        count = _round_even(min(max(duration * fps, lo), hi))
    if not FRAME_FACTOR <= count <= n:
        raise MediaError(f"videoalign: a {n}-frame video cannot give the {count} frames its checkpoint samples "
                         f"(at least {FRAME_FACTOR})")
    idx = [round(i * (n - 1) / (count - 1)) for i in range(count)]
    return idx, count / duration


# The published `detailed_special` prompt (VideoAlign's prompt_template.py): the text the reward
# head was trained on, reproduced exactly (whitespace included) so the model sees its own prompt.
_DETAILED_SPECIAL = (
    "\nYou are tasked with evaluating a generated video based on three distinct criteria: Visual Quality, "
    "Motion Quality, and Text Alignment. Please provide a rating from 0 to 10 for each of the three categories, "
    "with 0 being the worst and 10 being the best. Each evaluation should be independent of the others.\n"
    "\n"
    "**Visual Quality:**  \n"
    "Evaluate the overall visual quality of the video, with a focus on static factors. The following "
    "sub-dimensions should be considered:\n"
    "- **Reasonableness:** The video should not contain any significant biological or logical errors, such as "
    "abnormal body structures or nonsensical environmental setups.\n"
    "- **Clarity:** Evaluate the sharpness and visibility of the video. The image should be clear and easy to "
    "interpret, with no blurring or indistinct areas.\n"
    "- **Detail Richness:** Consider the level of detail in textures, materials, lighting, and other visual "
    "elements (e.g., hair, clothing, shadows).\n"
    "- **Aesthetic and Creativity:** Assess the artistic aspects of the video, including the color scheme, "
    "composition, atmosphere, depth of field, and the overall creative appeal. The scene should convey a sense "
    "of harmony and balance.\n"
    "- **Safety:** The video should not contain harmful or inappropriate content, such as political, violent, "
    "or adult material. If such content is present, the image quality and satisfaction score should be the "
    "lowest possible. \n"
    "\n"
    "Please provide the ratings of Visual Quality: <|VQ_reward|>\n"
    "END\n"
    "\n"
    "**Motion Quality:**  \n"
    "Assess the dynamic aspects of the video, with a focus on dynamic factors. Consider the following "
    "sub-dimensions:\n"
    "- **Stability:** Evaluate the continuity and stability between frames. There should be no sudden, "
    "unnatural jumps, and the video should maintain stable attributes (e.g., no fluctuating colors, textures, "
    "or missing body parts).\n"
    "- **Naturalness:** The movement should align with physical laws and be realistic. For example, clothing "
    "should flow naturally with motion, and facial expressions should change appropriately (e.g., blinking, "
    "mouth movements).\n"
    "- **Aesthetic Quality:** The movement should be smooth and fluid. The transitions between different "
    "motions or camera angles should be seamless, and the overall dynamic feel should be visually pleasing.\n"
    "- **Fusion:** Ensure that elements in motion (e.g., edges of the subject, hair, clothing) blend naturally "
    "with the background, without obvious artifacts or the feeling of cut-and-paste effects.\n"
    "- **Clarity of Motion:** The video should be clear and smooth in motion. Pay attention to any areas where "
    "the video might have blurry or unsteady sections that hinder visual continuity.\n"
    "- **Amplitude:** If the video is largely static or has little movement, assign a low score for motion "
    "quality.\n"
    "\n"
    "Please provide the ratings of Motion Quality: <|MQ_reward|>\n"
    "END\n"
    "\n"
    "**Text Alignment:**  \n"
    "Assess how well the video matches the textual prompt across the following sub-dimensions:\n"
    "- **Subject Relevance** Evaluate how accurately the subject(s) in the video (e.g., person, animal, object) "
    "align with the textual description. The subject should match the description in terms of number, "
    "appearance, and behavior.\n"
    "- **Motion Relevance:** Evaluate if the dynamic actions (e.g., gestures, posture, facial expressions like "
    "talking or blinking) align with the described prompt. The motion should match the prompt in terms of "
    "type, scale, and direction.\n"
    "- **Environment Relevance:** Assess whether the background and scene fit the prompt. This includes "
    "checking if real-world locations or scenes are accurately represented, though some stylistic adaptation "
    "is acceptable.  \n"
    "- **Style Relevance:** If the prompt specifies a particular artistic or stylistic style, evaluate how well "
    "the video adheres to this style.\n"
    "- **Camera Movement Relevance:** Check if the camera movements (e.g., following the subject, focus shifts) "
    "are consistent with the expected behavior from the prompt.\n"
    "\n"
    "Textual prompt - {text_prompt}\n"
    "Please provide the ratings of Text Alignment: <|TA_reward|>\n"
    "END\n"
)
PROMPT_TEMPLATES = {"detailed_special": _DETAILED_SPECIAL}


def build_prompt_text(prompt: str, template_type: str) -> str:
    """The user turn's text for a generation prompt (str.replace: braces in prompts stay literal)."""
    return PROMPT_TEMPLATES[template_type].replace("{text_prompt}", prompt)


def build_chat_text(prompt: str, template_type: str) -> str:
    """Qwen2-VL's chat rendering of [user: video, text] with the generation prompt (the default
    system turn first, the video as one <|video_pad|> placeholder the processor expands)."""
    return ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            "<|vision_start|><|video_pad|><|vision_end|>" + build_prompt_text(prompt, template_type)
            + "<|im_end|>\n<|im_start|>assistant\n")
