#!/usr/bin/env python3
"""Build a tiny, randomly initialised Qwen2.5-VL model that vLLM (CPU) can serve.

Usage (with the vLLM venv's interpreter, which has torch, transformers and tokenizers):

    .venv-vllm/bin/python -m tests.support.build_tiny_vlm OUT_DIR

The model has the architecture of Cosmos-Reason1-7B-Reward
(``Qwen2_5_VLForConditionalGeneration``) at toy size: text hidden 128, 2 layers, 4 heads of
32, 2 KV heads; vision hidden 64, depth 2. Everything is built offline and deterministically:

* a byte-level BPE tokenizer trained on generated text, with the Qwen special tokens and with
  "Yes", "No", " Yes", " No", "yes", "no" as single tokens;
* a Qwen2-VL chat template and hand-written image / video processor configs;
* seeded random weights, then two edits so that the next token after the assistant prompt is a
  Yes/No variant (P(yes-family) + P(no-family) about 0.8-0.99) while the Yes/No split depends
  on the text, image and video input:
    1. a large bias on the last layer's value projection adds a near-constant direction to the
       residual stream at every position;
    2. the lm_head rows of the answer tokens are set along that mean hidden direction (common
       logit: the answer mass) plus/minus a direction inside the observed input-to-input
       variation (the Yes/No split), scaled from calibration forward passes.

A marker file (``.tiny_vlm_builder.json``) lists the files and the calibration; the tests cache
the build under a hash of this builder (tests/support/tiny_cache.py, via ``build_tiny_model``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MARKER = ".tiny_vlm_builder.json"
SEED = 20261122

# Qwen2 pre-tokenizer split pattern (same behaviour as the Qwen2 tokenizer).
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

YES_WORDS = ["Yes", " Yes", "yes", " yes", "YES"]
NO_WORDS = ["No", " No", "no", " no", "NO"]
# Tokens that must exist as single tokens (tests rely on the first six).
REQUIRED_SINGLE = ["Yes", "No", " Yes", " No", "yes", "no", " yes", " no"]

# Chat template in the Qwen2-VL conventions: a default system turn, media as
# <|vision_start|><|image_pad|><|vision_end|> / <|video_pad|> placeholders.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(first=true) -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{%- endif -%}"
    "<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] }}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or part['type'] == 'image_url' or 'image' in part -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part['type'] == 'video' or part['type'] == 'video_url' or 'video' in part -%}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif 'text' in part -%}"
    "{{ part['text'] }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "<|im_start|>assistant\n"
    "{%- endif -%}"
)

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
PATCH, MERGE, TEMPORAL = 14, 2, 2
MIN_PIXELS, MAX_PIXELS = (
    3136,
    50176,
)  # 56*56 .. 224*224: at most 64 merged tokens per image
VIDEO_MAX_PIXELS = 50176

TEXT_HIDDEN, TEXT_LAYERS, TEXT_HEADS, TEXT_KV_HEADS = 128, 2, 4, 2
VISION_HIDDEN, VISION_DEPTH, VISION_HEADS = 64, 2, 2

# Calibration targets for the answer logits.
TARGET_MEDIAN_MASS = 0.93  # median P(yes-family) + P(no-family)
TARGET_SPLIT_LOGIT_STD = 1.1  # std over calibration inputs of logit(Yes) - logit(No)


# --------------------------------------------------------------------------- tokenizer


def training_corpus(rng: random.Random) -> list[str]:
    """Generated English-like text covering judge prompts, rubric replies and yes/no answers."""
    words = (  # noqa: SIM905
        "a an the this that these image images video videos picture frame frames scene photo "
        "does do is are was were it its there show shows showing contain contains depict of "
        "in on at to for with and or not by from as be any some all each one two three cat "
        "dog red blue green yellow black white car tree house person people sky water "
        "physical physics anomaly anomalies plausible implausible realistic motion object "
        "objects gravity collision consistent inconsistent generated prompt caption text "
        "answer question please reply only word judge judgement detailed score scores "
        "justification faithfulness quality aesthetics alignment plausibility overall final "
        "rating aspect aspects edit edited instruction source target good bad high low you "
        "are a helpful assistant user system carefully watch look following describe reason "
        "reasoning think step because however therefore but so if then else"
    ).split()
    answers = ["Yes", "No", "yes", "no", "YES", "NO"]
    rubric_lines = [
        "# Detailed Judgement",
        "1. Text Faithfulness:",
        "2. Image Quality:",
        "3. Physical Plausibility:",
        "## Justification:",
        "## Score:",
        "Final Score:",
        "N/A",
    ]
    lines: list[str] = []
    for _ in range(3000):
        n = rng.randint(3, 14)
        sent = " ".join(rng.choice(words) for _ in range(n))
        sent = sent[0].upper() + sent[1:]
        kind = rng.random()
        if kind < 0.35:
            lines.append(f"{sent}? {rng.choice(answers)}. {rng.choice(answers)}")
        elif kind < 0.55:
            lines.append(
                f"{rng.choice(rubric_lines)} {sent}. {rng.randint(1, 4)}.{rng.randint(0, 9)}"
            )
        elif kind < 0.65:
            lines.append(f"{rng.choice(answers)}, {sent.lower()}.")
        else:
            lines.append(sent + rng.choice([".", "!", "?", ",", ":", ";"]))
    for _ in range(
        500
    ):  # digits, numbers, punctuation, a little of everything printable
        lines.append(" ".join(str(rng.randint(0, 100)) for _ in range(6)))
        lines.append("".join(chr(rng.randint(33, 126)) for _ in range(12)))
    lines += [" Yes No yes no Yes No"] * 200
    return lines


def build_tokenizer(out_dir: Path, rng: random.Random, *, chat_template: str = CHAT_TEMPLATE,
                    tokenizer_class: str = "Qwen2Tokenizer", extra_words: tuple[str, ...] = (),
                    extra_lines: tuple[str, ...] = ()):
    """The byte-level BPE tokenizer; `extra_words` must come out as single tokens too (the corpus
    gets `extra_lines` to learn them)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=1500,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(training_corpus(rng) + list(extra_lines), trainer=trainer)
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )

    for word in REQUIRED_SINGLE + YES_WORDS + NO_WORDS + list(extra_words):
        ids = tok.encode(word, add_special_tokens=False).ids
        if len(ids) != 1:
            raise RuntimeError(f"tokenizer: {word!r} is not a single token: {ids}")
    for special in SPECIAL_TOKENS:
        if tok.token_to_id(special) is None:
            raise RuntimeError(f"tokenizer: special token {special} missing")

    tok.save(str(out_dir / "tokenizer.json"))
    special_ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    tokenizer_config = {
        "tokenizer_class": tokenizer_class,
        "model_max_length": 32768,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "unk_token": None,
        "errors": "replace",
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "extra_special_tokens": [],
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t, i in special_ids.items()
        },
        "chat_template": chat_template,
    }
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=2)
    )
    (out_dir / "chat_template.jinja").write_text(chat_template)
    return tok, special_ids


def write_processor_configs(out_dir: Path) -> None:
    image_cfg = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor",
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "resample": 3,
        "min_pixels": MIN_PIXELS,
        "max_pixels": MAX_PIXELS,
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        "patch_size": PATCH,
        "temporal_patch_size": TEMPORAL,
        "merge_size": MERGE,
    }
    video_cfg = {
        "video_processor_type": "Qwen2VLVideoProcessor",
        "processor_class": "Qwen2_5_VLProcessor",
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "resample": 3,
        "min_pixels": MIN_PIXELS,
        "max_pixels": VIDEO_MAX_PIXELS,
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": VIDEO_MAX_PIXELS},
        "patch_size": PATCH,
        "temporal_patch_size": TEMPORAL,
        "merge_size": MERGE,
        "do_sample_frames": False,
    }
    (out_dir / "preprocessor_config.json").write_text(json.dumps(image_cfg, indent=2))
    (out_dir / "video_preprocessor_config.json").write_text(
        json.dumps(video_cfg, indent=2)
    )


# --------------------------------------------------------------------------- model


def base_text_config(vocab_size: int, special_ids: dict[str, int], **more) -> dict:
    """The text model's size and token ids, the same for every tiny Qwen-VL (`more` adds to it)."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": TEXT_HIDDEN,
        "intermediate_size": 256,
        "num_hidden_layers": TEXT_LAYERS,
        "num_attention_heads": TEXT_HEADS,
        "num_key_value_heads": TEXT_KV_HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "bos_token_id": special_ids["<|endoftext|>"],
        "eos_token_id": special_ids["<|im_end|>"],
        "pad_token_id": special_ids["<|endoftext|>"],
        "tie_word_embeddings": False,
        **more,
    }


def media_token_ids(special_ids: dict[str, int]) -> dict[str, int]:
    """The ids a Qwen-VL config names for its image, video and vision-span tokens."""
    return {"image_token_id": special_ids["<|image_pad|>"], "video_token_id": special_ids["<|video_pad|>"],
            "vision_start_token_id": special_ids["<|vision_start|>"],
            "vision_end_token_id": special_ids["<|vision_end|>"]}


def make_config(vocab_size: int, special_ids: dict[str, int]):
    from transformers import Qwen2_5_VLConfig

    head_dim = (
        TEXT_HIDDEN // TEXT_HEADS
    )  # 32: the CPU attention backend needs 32/64/80/...
    text_config = base_text_config(
        vocab_size, special_ids,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                         "mrope_section": [4, 6, 6]},  # sums to head_dim / 2
        use_sliding_window=False)
    assert sum(text_config["rope_parameters"]["mrope_section"]) == head_dim // 2
    vision_config = {
        "depth": VISION_DEPTH,
        "hidden_size": VISION_HIDDEN,
        "intermediate_size": 128,
        "num_heads": VISION_HEADS,
        "in_channels": 3,
        "patch_size": PATCH,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": TEMPORAL,
        "tokens_per_second": 2,
        "window_size": 112,
        "out_hidden_size": TEXT_HIDDEN,
        "fullatt_block_indexes": [VISION_DEPTH - 1],
        "hidden_act": "silu",
    }
    config = Qwen2_5_VLConfig(text_config=text_config, vision_config=vision_config, **media_token_ids(special_ids),
                              tie_word_embeddings=False)
    config.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    config.dtype = "float32"
    return config


def calibration_inputs(rng: random.Random):
    """Calibration set: (messages, images, videos) triples, and where each group sits.

    Returns (samples, layout): layout["text_only"] is a slice of text-only samples and
    layout["grid"] = (start, n_texts, n_images) a texts x images block (sample start + t*n_images
    + i pairs text t with image i); videos follow.
    """
    import numpy as np
    from PIL import Image

    nrng = np.random.default_rng(rng.randint(0, 2**31))
    images = []
    for i in range(6):  # solid colours
        color = tuple(int(c) for c in nrng.integers(0, 256, 3))
        images.append(Image.new("RGB", (64 + 16 * i, 64), color))
    for _ in range(6):  # noise at various sizes
        h, w = int(nrng.integers(48, 224)), int(nrng.integers(48, 224))
        images.append(Image.fromarray(nrng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
    for i in range(4):  # gradients / stripes
        x = np.linspace(0, 255, 96, dtype=np.float32)
        arr = np.stack(np.meshgrid(x, x[:: (1 if i % 2 else -1)]), -1)
        arr = np.concatenate([arr, np.full((96, 96, 1), 40.0 * i, np.float32)], -1)
        images.append(Image.fromarray(arr.astype(np.uint8)))
    texts = [
        "Does this image show a cat?",
        "Is the picture realistic? Answer Yes or No.",
        "Does the video contain any physical anomalies?",
        "Is there a red car in the scene?",
        "Please judge the image quality.",
        "Answer with one word.",
        "Are the objects consistent with gravity?",
        "Does this image match the caption: a blue house under a green tree?",
    ]
    samples = []
    for t in texts:  # text only
        samples.append(
            ([{"role": "user", "content": [{"type": "text", "text": t}]}], None, None)
        )
    grid_texts = texts[:5]
    layout = {
        "text_only": slice(0, len(texts)),
        "grid": (len(samples), len(grid_texts), len(images)),
    }
    for t in grid_texts:
        for img in images:
            content = [{"type": "image"}, {"type": "text", "text": t}]
            samples.append(([{"role": "user", "content": content}], [img], None))
    for t in texts[2:5]:
        for k in range(4):
            n = 4 * (k + 1)
            frames = nrng.integers(0, 256, (n, 112, 112, 3), dtype=np.uint8)
            frames[:, :, :, k % 3] //= 4
            content = [{"type": "video"}, {"type": "text", "text": t}]
            samples.append(([{"role": "user", "content": content}], None, [frames]))
    return samples, layout


def last_hidden_states(model, processor, samples):
    import torch

    out = []
    with torch.no_grad():
        for messages, images, videos in samples:
            text = processor.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            kwargs = {"text": [text], "return_tensors": "pt"}
            if images:
                kwargs["images"] = images
            if videos:
                kwargs["videos"] = videos
            inputs = processor(**kwargs)
            hidden = model.model(**inputs).last_hidden_state  # after the final norm
            out.append(hidden[0, -1].float())
    return torch.stack(out)


def answer_probs(hidden, lm_head_w, yes_ids, no_ids):
    import torch

    logp = torch.log_softmax(hidden @ lm_head_w.T, dim=-1)
    p = logp.exp()
    p_yes = p[:, yes_ids].sum(-1)
    p_no = p[:, no_ids].sum(-1)
    return p_yes, p_no


def shape_answer_head(model, processor, tok, samples, layout, gen, extra_answers: tuple[str, ...] = (),
                      extra_offset: float = -4.0):
    """Edit the last layer's v_proj bias and the answer lm_head rows (see module docstring).

    `extra_answers`: more tokens (number words, say) put in the top-K too, `extra_offset` logits
    below the main answers, each moved by the input along a direction of its own."""
    import torch

    text_model = model.model.language_model
    last = text_model.layers[-1]

    # 1. constant direction in the residual stream via the value bias of the last layer.
    v_dir = torch.randn(last.self_attn.v_proj.out_features, generator=gen)
    v_dir /= v_dir.norm()
    with torch.no_grad():
        # each KV head serves num_heads / num_kv_heads query heads (GQA)
        groups = TEXT_HEADS // TEXT_KV_HEADS
        v_expanded = (
            v_dir.view(TEXT_KV_HEADS, -1).repeat_interleave(groups, dim=0).flatten()
        )
        o_out = last.self_attn.o_proj.weight @ v_expanded
        # pre-norm residual scale: measure it with a hook on the final norm's input
        captured = []
        handle = text_model.norm.register_forward_hook(
            lambda m, i, o: captured.append(i[0][0, -1])
        )
        last_hidden_states(model, processor, samples[:12])
        handle.remove()
        resid_norm = torch.stack(captured).norm(dim=-1).median()
        scale = 2.0 * resid_norm / o_out.norm()
        last.self_attn.v_proj.bias.copy_(last.self_attn.v_proj.bias + scale * v_dir)

    # 2. answer rows of lm_head from calibration hidden states.
    hidden = last_hidden_states(model, processor, samples)
    mean = hidden.mean(0)
    m_hat = mean / mean.norm()

    def principal(effects):
        effects = effects - (effects @ m_hat)[:, None] * m_hat[None, :]
        direction = torch.linalg.svd(effects, full_matrices=False).Vh[0]
        return direction, (effects @ direction).std()

    # how the text moves the state (with and without an image), and how the image does
    start, n_texts, n_images = layout["grid"]
    grid = hidden[start : start + n_texts * n_images].view(n_texts, n_images, -1)
    text_only = hidden[layout["text_only"]]
    text_effects = torch.cat(
        [grid.mean(1) - grid.mean((0, 1)), text_only - text_only.mean(0)]
    )
    image_effects = grid.mean(0) - grid.mean((0, 1))
    t_dir, t_std = principal(text_effects)
    i_dir, i_std = principal(image_effects)
    # weight both so that text and image changes move the split by comparable amounts
    u = t_dir / t_std + i_dir / i_std
    u = u - (u @ m_hat) * m_hat
    u /= u.norm()
    proj = hidden @ u
    proj_std = proj.std()
    beta = TARGET_SPLIT_LOGIT_STD / (2 * proj_std)
    s = hidden @ m_hat

    yes_ids = [
        tok.token_to_id(tok.encode(w, add_special_tokens=False).tokens[0])
        for w in YES_WORDS
    ]
    no_ids = [
        tok.token_to_id(tok.encode(w, add_special_tokens=False).tokens[0])
        for w in NO_WORDS
    ]
    # main answers get the full common logit, variants a bit less (still in the top-20)
    offsets = {0: 0.0, 1: -1.5, 2: -2.0, 3: -3.0, 4: -3.5}

    w = model.lm_head.weight.detach().clone()
    extra_ids = [tok.token_to_id(tok.encode(word, add_special_tokens=False).tokens[0]) for word in extra_answers]
    extra_dirs = []
    for _ in extra_ids:
        d = torch.randn(hidden.shape[1], generator=gen)
        d = d - (d @ m_hat) * m_hat
        extra_dirs.append(d / d.norm() * float(beta) * float(proj_std) / max(float((hidden @ (d / d.norm())).std()), 1e-6))

    # centre the split: logit(Yes) - logit(No) = 2 * beta * (h.u - median(h.u)); the constant
    # offset rides on m_hat, along which every input has nearly the same projection s
    offset = float(beta * proj.median() / s.mean())

    def set_rows(alpha):
        for rank, (yi, ni) in enumerate(zip(yes_ids, no_ids)):
            common = (alpha + offsets[rank] / s.mean()) * m_hat
            w[yi] = common + beta * u - offset * m_hat
            w[ni] = common - beta * u + offset * m_hat
        for xi, xd in zip(extra_ids, extra_dirs):
            w[xi] = (alpha + extra_offset / s.mean()) * m_hat + xd

    # bisect alpha for the target median answer mass
    lo, hi = 0.0, 200.0 / float(s.mean())
    for _ in range(60):
        mid = (lo + hi) / 2
        set_rows(mid)
        p_yes, p_no = answer_probs(hidden, w, yes_ids, no_ids)
        if float((p_yes + p_no).median()) < TARGET_MEDIAN_MASS:
            lo = mid
        else:
            hi = mid
    set_rows(hi)
    with torch.no_grad():
        model.lm_head.weight.copy_(w)
    p_yes, p_no = answer_probs(hidden, w, yes_ids, no_ids)
    mass = p_yes + p_no
    split = p_yes / mass
    return {
        "answer_mass_min": round(float(mass.min()), 4),
        "answer_mass_median": round(float(mass.median()), 4),
        "answer_mass_max": round(float(mass.max()), 4),
        "split_min": round(float(split.min()), 4),
        "split_median": round(float(split.median()), 4),
        "split_max": round(float(split.max()), 4),
        "yes_token_ids": yes_ids,
        "no_token_ids": no_ids,
        **({"extra_token_ids": extra_ids} if extra_ids else {}),
    }


def build(out_dir: Path) -> dict:
    import numpy as np
    import torch

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # bit-stable reductions in the calibration passes
    rng = random.Random(SEED)
    gen = torch.Generator().manual_seed(SEED)

    tok, special_ids = build_tokenizer(out_dir, rng)
    vocab_size = ((tok.get_vocab_size() + 63) // 64) * 64
    write_processor_configs(out_dir)

    from transformers import (
        AutoProcessor,
        GenerationConfig,
        Qwen2_5_VLForConditionalGeneration,
    )

    config = make_config(vocab_size, special_ids)
    torch.manual_seed(SEED)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32).eval()
    init_weights(model, gen)

    processor = AutoProcessor.from_pretrained(str(out_dir))
    stats = shape_answer_head(model, processor, tok, *calibration_inputs(rng), gen)
    save(model, out_dir, special_ids, GenerationConfig)
    stats["vocab_size"] = vocab_size
    return stats


def init_weights(model, gen) -> None:
    """Seeded normal(0, 0.02) weights, norms at 1 / 0: independent of transformers' own init."""
    import torch

    with torch.no_grad():
        norm_params = set()
        for mod_name, module in model.named_modules():
            if "norm" in type(module).__name__.lower():
                for p_name, _ in module.named_parameters(recurse=False):
                    norm_params.add(f"{mod_name}.{p_name}")
        for name, p in sorted(model.named_parameters()):
            if name in norm_params:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)


def save(model, out_dir: Path, special_ids: dict[str, int], generation_config) -> None:
    model.save_pretrained(str(out_dir), safe_serialization=True)
    generation_config(
        bos_token_id=special_ids["<|endoftext|>"],
        eos_token_id=[special_ids["<|im_end|>"], special_ids["<|endoftext|>"]],
        pad_token_id=special_ids["<|endoftext|>"],
    ).save_pretrained(str(out_dir))


def main(argv: list[str] | None = None, build_fn=None, marker_name: str = MARKER, doc: str | None = None) -> int:
    """Build into OUT_DIR with `build_fn` (this module's `build` by default), then write the marker."""
    build_fn = build_fn or build
    parser = argparse.ArgumentParser(description=(doc or __doc__).split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)

    out_dir: Path = args.out_dir.resolve()
    t0 = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    stats = build_fn(out_dir)
    files = sorted(p.name for p in out_dir.iterdir() if p.is_file())
    marker = {"files": files, "seed": SEED, "calibration": stats}
    (out_dir / marker_name).write_text(json.dumps(marker, indent=2))  # last: the build is complete
    print(f"built tiny VLM in {out_dir} in {time.monotonic() - t0:.1f} s: {json.dumps(stats)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
