"""The atoms of a prompt for the answer_probability kind: VQA questions with their expected answer
(GenEval 2's `vqa_list`), and where they come from.

A sample's own `metadata.vqa_list` wins; else its prompt is looked up in the judge's atoms file, a
JSONL file in GenEval 2's format (facebookresearch/GenEval2 `geneval2_data.jsonl`: `prompt`,
`atom_count`, `vqa_list` = [[question, answer], ...], `skills` = one per question), so GenEval 2's
data file is used as it is. The file is read once per path and content (cached by sha256).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .exceptions import ConfigurationError, InvalidInput
from .jsonl import iter_objects_in

METADATA_KEY = "vqa_list"
SKILLS_KEY = "skills"
MAX_ATOMS = 64  # a prompt's questions, one request each


class AtomsFileError(ConfigurationError):
    """An atoms file that cannot be used; the message names the file and the line."""


class AtomsError(InvalidInput):
    """A sample's atoms that cannot be used (the message says why)."""


@dataclass(frozen=True)
class Atom:
    question: str
    answer: str
    skill: str | None = None


def parse_atoms(vqa_list: Any, skills: Any = None, *, where: str = "vqa_list") -> tuple[Atom, ...]:
    """[[question, answer], ...] (and optional skills, one per question) -> atoms; AtomsError says why not."""
    if not isinstance(vqa_list, list) or not vqa_list:
        raise AtomsError(f"{where} must be a non-empty list of [question, answer] pairs")
    if len(vqa_list) > MAX_ATOMS:
        raise AtomsError(f"{where} has {len(vqa_list)} atoms, more than {MAX_ATOMS}")
    if skills is not None and (not isinstance(skills, list) or len(skills) != len(vqa_list)
                               or not all(isinstance(s, str) for s in skills)):
        raise AtomsError(f"{where}: skills must be a list of strings, one per question")
    atoms = []
    for i, pair in enumerate(vqa_list):
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                or not all(isinstance(x, str) and x.strip() for x in pair)):
            raise AtomsError(f"{where}[{i}] must be [question, answer], two non-empty strings, got {pair!r:.80}")
        atoms.append(Atom(pair[0], pair[1], skills[i] if skills is not None else None))
    return tuple(atoms)


@dataclass(frozen=True)
class AtomsFile:
    path: Path
    sha256: str
    by_prompt: Mapping[str, tuple[Atom, ...]]


_CACHE: dict[tuple[str, str], AtomsFile] = {}


def load_atoms_file(path: str | Path) -> AtomsFile:
    """Read and check a GenEval 2-format JSONL file (cached by path and content)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as err:
        raise AtomsFileError(f"atoms file {p}: cannot read ({err.strerror})") from None
    digest = hashlib.sha256(data).hexdigest()
    key = (str(p.resolve()), digest)
    if key in _CACHE:
        return _CACHE[key]
    by_prompt: dict[str, tuple[Atom, ...]] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AtomsFileError(f"atoms file {p}: not UTF-8") from None
    for _, where, obj in iter_objects_in(text, f"atoms file {p}", AtomsFileError):
        if not isinstance(obj.get("prompt"), str):
            raise AtomsFileError(f"{where}: a line is an object with a `prompt` string")
        try:
            atoms = parse_atoms(obj.get(METADATA_KEY), obj.get(SKILLS_KEY), where=f"{where}: {METADATA_KEY}")
        except AtomsError as err:
            raise AtomsFileError(str(err)) from None
        if obj["prompt"] in by_prompt:
            raise AtomsFileError(f"{where}: prompt {obj['prompt']!r:.80} is listed twice")
        by_prompt[obj["prompt"]] = atoms
    if not by_prompt:
        raise AtomsFileError(f"atoms file {p}: no atoms in it")
    loaded = AtomsFile(p, digest, by_prompt)
    _CACHE[key] = loaded
    return loaded


def sample_atoms(prompt: str, metadata: Mapping[str, Any], atoms_file: AtomsFile | None) -> tuple[tuple[Atom, ...], str]:
    """A sample's atoms and where they came from ("metadata" or "atoms_file"); AtomsError when it has none."""
    if METADATA_KEY in metadata:
        return parse_atoms(metadata[METADATA_KEY], metadata.get(SKILLS_KEY), where=f"metadata.{METADATA_KEY}"), "metadata"
    if atoms_file is not None and prompt in atoms_file.by_prompt:
        return atoms_file.by_prompt[prompt], "atoms_file"
    source = f" and its prompt is not in {atoms_file.path.name}" if atoms_file is not None else " (no atoms_file set)"
    raise AtomsError(f"the sample has no atoms: no metadata.{METADATA_KEY}{source}")
