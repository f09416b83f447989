"""`judge-gateway samples DIR`: write a small folder of samples to try `score` on, with nothing to
download: signs with their text rendered (most as the prompt asks, some misspelt), each image with
its prompt in a same-named .txt, as `score` reads a folder. The OCR judge scores them on a fresh
machine (the quickstart's `score ./samples/ --judges ocr`): the misspelt ones get less than 1."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# (file stem, prompt, the text drawn): the prompt quotes the text the OCR judge looks for.
SAMPLES = (
    ("open_sign", 'a shop window sign that says "OPEN"', "OPEN"),
    ("hello_world", 'a sign that says "Hello World"', "Hello World"),
    ("summer_sale", 'a poster that reads "Summer Sale"', "Sumer Sale"),
    ("main_street", 'a street sign that says "Main Street"', "Main Stret"),
    ("thank_you", 'a greeting card that says "THANK YOU"', "THANK YOU"),
    ("no_parking", 'a white sign reading "NO PARKING"', "NO PARKING"),
)


def write_samples(folder: Path) -> list[Path]:
    """The images (PNG) and prompts of SAMPLES in `folder`; the image paths. Refuses to write
    over a file that is there."""
    from PIL import Image

    from ..prepare import text_image

    folder.mkdir(parents=True, exist_ok=True)
    taken = [p.name for stem, _, _ in SAMPLES for p in (folder / f"{stem}.png", folder / f"{stem}.txt") if p.exists()]
    if taken:
        shown = ", ".join(taken[:3]) + (", ..." if len(taken) > 3 else "")
        raise ValueError(f"{folder} already holds {len(taken)} of the files this writes ({shown}): "
                         "name an empty or new folder")
    written = []
    for stem, prompt, drawn in SAMPLES:
        image = folder / f"{stem}.png"
        Image.fromarray(text_image(drawn, (640, 200), font_size=56)).save(image)
        (folder / f"{stem}.txt").write_text(prompt + "\n", encoding="utf-8")
        written.append(image)
    return written


def _cmd_samples(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    written = write_samples(folder)
    print(f"wrote {len(written)} samples (a PNG and its prompt in a .txt each) to {folder}", file=sys.stderr)
    print(f"score them: judge-gateway score {folder} -o runs/first --judges ocr", file=sys.stderr)
    return 0


def register_samples(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("samples", help="write a small folder of example samples (rendered signs and their "
                                       "prompts) to try `score` on")
    s.add_argument("folder", nargs="?", default="samples", help="the folder to write them to")
    s.set_defaults(func=_cmd_samples)
