"""The fuzz families, on every route: seeded, reproducible hostile requests.

Each case is (family, method, path, headers, body). Families: deep JSON nesting, integers past
4,300 digits, invalid UTF-8, lone surrogates, 100k+ character prompts, more samples than allowed,
small media declaring huge decoded sizes (PNG, mp4), hostile npy / torch payloads, random and
truncated bodies, byte flips of valid bodies, wrong JSON types, oversized forms and headers,
unknown paths and methods, and valid requests (the control group).
"""

from __future__ import annotations

import base64
import io
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tests.support.hostile_media import (
    mp4_of_black_frames,
    png_declaring,
    torch_zip_with_deflated_pickle,
)

JSON_H = {"content-type": "application/json"}
OCTET_H = {"content-type": "application/octet-stream"}
FORM_H = {"content-type": "application/x-www-form-urlencoded"}


@dataclass
class Case:
    family: str
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


class Media:
    """Built once: small valid media and small hostile media."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, format="PNG")
        self.png = buf.getvalue()
        self.png_tiny = png_declaring(2, 2)
        self.png_huge = png_declaring(8000, 8000)  # 186 KB, 192 MB decoded
        self.png_tall = png_declaring(64, 60000)
        self.mp4_small = mp4_of_black_frames(8, 64, 64)
        self.mp4_huge = mp4_of_black_frames(160, 1920, 1080)  # ~20 KB, ~1 GB decoded
        self.torch_bomb = torch_zip_with_deflated_pickle(256 << 20)
        self.npy_image = _npy(rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8))
        self.npy_video = _npy(rng.integers(0, 256, (1, 3, 8, 16, 16), dtype=np.uint8))


def _native(prompt: object, image: object, n: int = 1, extra: dict | None = None) -> dict:
    return {"samples": [{"prompt": prompt, "image": image, **(extra or {})} for _ in range(n)]}


def _flow(prompts: list, images: list) -> dict:
    return {"prompt": prompts, "image": images, "video": None, "condition_images": None, "condition_videos": None}


def _enqueue(meta: dict | bytes, tensor: bytes) -> bytes:
    head = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    return head + b"\n" + tensor


def _deep(r: random.Random) -> bytes:
    depth = r.choice([300, 1000, 5000, 50000])
    return (b"[" * depth + b"]" * depth) if r.random() < 0.5 else (b'{"a":' * depth + b"1" + b"}" * depth)


def _json_value(r: random.Random) -> object:
    return r.choice([None, True, -1, 0, 1e308, 3.5, "", "x" * 10, [], {}, [1, [2]],
                     {"a": {"b": None}}, "\u0000", "😀" * 5])


class Fuzzer:
    def __init__(self, seed: int = 0, profile: str = "t2i") -> None:
        self.r = random.Random(seed)
        self.m = Media()
        self.ff = f"/flow-factory/{profile}"

    # a JSON-valued slot per route, filled with a hostile raw JSON value
    def _in_route(self, route: str, value: bytes) -> tuple[str, str, dict, bytes]:
        img = _b64(self.m.png).encode()
        if route == "native":
            return "POST", "/v1/rewards", JSON_H, b'{"samples": [{"prompt": %s, "image": "%s"}]}' % (value, img)
        if route == "flow":
            return "POST", self.ff + "/compute", JSON_H, b'{"prompt": [%s], "image": ["%s"]}' % (value, img)
        if route == "enqueue":
            meta = b'{"reward_fn": {"quality": 1}, "media_type": "image", "prompts": [%s, "b"]}' % value
            return "POST", "/api/reward/enqueue", OCTET_H, meta + b"\n" + self.m.npy_image
        if route == "latent_attr":
            return "POST", "/api/reward/latent_attr", JSON_H, b'{"fields": %s}' % value
        path = "/api/reward/pull" if route == "pull" else "/api/reward/ping"
        return "POST", path, JSON_H, b'{"uuid": %s, "type": "quality"}' % value

    def _valid(self, route: str) -> tuple[str, str, dict, bytes]:
        r = self.r
        if route == "native":
            return "POST", "/v1/rewards", JSON_H, json.dumps(_native(f"a cat {r.random()}", _b64(self.m.png),
                                                                     r.randint(1, 3))).encode()
        if route == "flow":
            n = r.randint(1, 3)
            return "POST", self.ff + "/compute", JSON_H, json.dumps(_flow(["a cat"] * n, [_b64(self.m.png)] * n)).encode()
        if route == "enqueue":
            meta = {"reward_fn": {"quality": 1.0}, "media_type": "image", "prompts": ["a", "b"]}
            return "POST", "/api/reward/enqueue", OCTET_H, _enqueue(meta, self.m.npy_image)
        if route == "pull":
            return "POST", "/api/reward/pull", FORM_H, b"uuid=00000000-0000-4000-8000-000000000001&type=quality"
        return "POST", "/api/reward/ping", FORM_H, b"info_data=hello"

    ROUTES = ("native", "flow", "enqueue", "pull", "ping", "latent_attr")

    def case(self) -> Case:
        r = self.r
        family = r.choice(FAMILIES)
        route = r.choice(self.ROUTES)
        m = self.m
        if family == "deep":
            method, path, h, body = self._in_route(route, _deep(r))
        elif family == "big_int":
            method, path, h, body = self._in_route(route, b"9" * r.choice([4301, 5000, 100000]))
        elif family == "bad_utf8":
            method, path, h, body = self._in_route(route, b'"' + bytes(r.randrange(128, 256) for _ in range(8)) + b'"')
        elif family == "lone_surrogate":
            method, path, h, body = self._in_route(route, r.choice([b'"\\ud800"', b'"a\\udfff"', b'"\\ud800\\u0041"']))
        elif family == "long_prompt":
            method, path, h, body = self._in_route(route, json.dumps("p" * r.choice([100_001, 300_000])).encode())
        elif family == "wrong_type":
            method, path, h, body = self._in_route(route, json.dumps(_json_value(r)).encode())
        elif family == "too_many":
            n = r.choice([4097, 5000])
            if route == "flow":
                method, path, h = "POST", self.ff + "/compute", JSON_H
                body = json.dumps(_flow(["a"] * n, [_b64(m.png_tiny)] * n)).encode()
            elif route == "enqueue":
                method, path, h = "POST", "/api/reward/enqueue", OCTET_H
                body = _enqueue({"reward_fn": {"quality": 1.0}, "media_type": "image", "prompts": ["a"] * n},
                                _npy(np.zeros((n, 1, 1, 3), np.uint8)))
            else:
                method, path, h = "POST", "/v1/rewards", JSON_H
                body = json.dumps(_native("a", _b64(m.png_tiny), n)).encode()
        elif family == "huge_media":
            media = r.choice([m.png_huge, m.png_tall, m.mp4_huge])
            key = "video" if media is m.mp4_huge else "image"
            if route == "flow" and key == "image":
                method, path, h, body = "POST", self.ff + "/compute", JSON_H, json.dumps(
                    _flow(["a"] * 8, [_b64(media)] * 8)).encode()
            else:
                sample = {"prompt": "a", key: _b64(media)}
                judges = ["cosmos_reason1"] if key == "video" else ["quality"]
                method, path, h = "POST", "/v1/rewards", JSON_H
                body = json.dumps({"samples": [sample] * r.randint(1, 8), "judges": judges}).encode()
        elif family == "tensor":
            method, path, h = "POST", "/api/reward/enqueue", OCTET_H
            meta = {"reward_fn": {r.choice(["quality", "cosmos_reason1"]): 1.0},
                    "media_type": r.choice(["image", "video", "latent", None]), "prompts": ["a"],
                    "video_infos": [{"video_fps": 16}]}
            tensor = r.choice([
                m.torch_bomb, m.npy_video, _npy(np.zeros((1, 3, 100000, 2, 2), np.uint8)[:, :, :0]),
                b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000, 3, 3), }"
                + b" " * 40 + b"\n",
                b"\x93NUMPY\x01\x00\x46\x00{'descr': '|O', 'fortran_order': False, 'shape': (1,), }" + b" " * 10 + b"\n",
                _npy(np.zeros((1, 4, 4, 3), np.float64)), bytes(r.randrange(256) for _ in range(64)),
                m.npy_image[: r.randrange(len(m.npy_image))]])
            body = _enqueue(meta, tensor)
        elif family == "random_bytes":
            route_m, path, h, _ = self._valid(route)
            method = route_m
            body = bytes(r.randrange(256) for _ in range(r.randint(0, 2048)))
        elif family == "truncated":
            method, path, h, body = self._valid(route)
            body = body[: r.randrange(max(1, len(body)))]
        elif family == "flipped":
            method, path, h, body = self._valid(route)
            b = bytearray(body)
            for _ in range(r.randint(1, 8)):
                b[r.randrange(len(b))] = r.randrange(256)
            body = bytes(b)
        elif family == "form":
            method, path, h = "POST", r.choice(["/api/reward/pull", "/api/reward/ping", "/api/reward/latent_attr"]), FORM_H
            body = "&".join(f"f{i}={'x' * r.randint(0, 5)}" for i in range(r.choice([2, 65, 5000]))).encode()
        elif family == "headers":
            method, path, h, body = self._valid(route)
            h = {**h, **{f"x-h{i}": "v" * r.randint(1, 100) for i in range(r.choice([101, 500]))}}
        elif family == "paths":
            method = r.choice(["GET", "POST", "PUT", "DELETE", "PATCH"])
            path = r.choice(["/v1/judges", "/healthz", "/readyz", "/metrics", "/docs", "/openapi.json",
                             self.ff + "/health", self.ff + "/load", self.ff + "/offload", "/flow-factory/nope/compute",
                             "/v1/rewards/../../etc/passwd", "/api/reward/" + "x" * 3000, "/%ff%fe"])
            h, body = {}, b""
        else:  # valid: the control group, must score
            method, path, h, body = self._valid(route if route != "latent_attr" else "native")
        return Case(family, method, path, h, body)

    def cases(self, n: int) -> Iterator[Case]:
        for _ in range(n):
            yield self.case()


FAMILIES = ["deep", "big_int", "bad_utf8", "lone_surrogate", "long_prompt", "wrong_type", "too_many", "huge_media",
            "tensor", "random_bytes", "truncated", "flipped", "form", "headers", "paths", "valid"]
