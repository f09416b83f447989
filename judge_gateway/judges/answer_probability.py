"""Answer-probability judges (GenEval 2's Soft-TIFA): per atom of the prompt (a VQA question and its
expected answer), the probability the VLM gives that answer as its first token; the prompt's score
is the arithmetic (Soft-TIFA AM) or geometric (Soft-TIFA GM) mean of its atoms, as in GenEval 2's
evaluation.py (facebookresearch/GenEval2): both means are in details, the template (or
`options.mean`) says which is the reward.

Atoms come from the sample (`metadata.vqa_list`, GenEval 2's field) or, by prompt, from the judge's
`atoms_file` (GenEval 2's geneval2_data.jsonl as it is): the Flow-Factory protocol carries no
metadata, so there the file is how atoms arrive. One request per atom, the image first in each,
so vLLM computes the image once for all of a prompt's atoms. A question is read against the answer
set its template assigns by question prefix (GenEval 2's "How many" questions: number words;
every other question: yes/no). An atom without an answer is never a 0: `on_atom_failure` makes
the score invalid (default) or leaves the atom out of the means, listed in details.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..atoms import Atom, AtomsError, load_atoms_file, sample_atoms
from ..backends import BackendFault
from ..config import AnswerProbabilityOptions, JudgeConfig
from ..parsers import ParseError, atom_means, parse_answer_probability
from ..schema import ErrorCode
from .base import JudgeFailure, ScoreContext, Verdict
from .vlm import VLMJudge, media_body
from .yes_no import ask_one_token

if TYPE_CHECKING:
    from ..backends import BackendPool
    from ..prompts import AnswerSet
    from ..schema import SampleInput


class AnswerProbabilityJudge(VLMJudge):
    def __init__(self, name: str, cfg: JudgeConfig, pool: BackendPool) -> None:
        super().__init__(name, cfg, pool)
        assert isinstance(cfg.options, AnswerProbabilityOptions)  # typed at config load (config.kinds)
        self.options = cfg.options
        t = self.template
        self.counting = self.options.counting or t.counting or "variants"
        self.normalize = self.options.normalize or t.normalize or "none"
        self.mean = self.options.mean or t.mean or "geometric"
        self.atoms_file = load_atoms_file(self.options.atoms_file) if self.options.atoms_file else None

    def answer_set(self, question: str) -> AnswerSet:
        """The set a question is read against: the first whose prefix it starts with, else the default."""
        sets = self.template.answer_sets
        for s in sets:
            if s.question_prefix is not None and question.startswith(s.question_prefix):
                return s
        default = [s for s in sets if s.question_prefix is None]
        if not default:
            raise JudgeFailure(ErrorCode.bad_input, f"question {question!r:.80} matches no answer set of "
                               f"{self.template.ref} ({[s.question_prefix for s in sets]})")
        return default[0]

    async def _atom(self, atom: Atom, prompt: str, parts: dict, affinity: int | None,
                    body: dict[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = {"question": atom.question, "answer": atom.answer, "skill": atom.skill}
        try:
            answers = self.answer_set(atom.question)
            record["answer_set"] = answers.name
            messages = self.template.render(prompt, parts, question=atom.question)
            token, top = await ask_one_token(self.pool, messages, affinity, self.options.top_logprobs, body=body)
            result = parse_answer_probability(
                top, atom.answer, answers.words, numerals=answers.numerals, counting=self.counting,
                normalize=self.normalize, min_answer_mass=self.options.min_answer_mass)
        except JudgeFailure as exc:
            return {**record, "valid": False, "error": {"code": exc.code.value, "message": exc.message}}
        except ParseError as exc:
            return {**record, "valid": False, "error": {"code": exc.code, "message": str(exc)}}
        except BackendFault as exc:
            return {**record, "valid": False, "error": {"code": ErrorCode(exc.code).value, "message": str(exc)}}
        return {**record, "valid": True, "answer_token": token, **result.details()}

    async def evaluate(self, sample: SampleInput, ctx: ScoreContext) -> Verdict:
        try:
            atoms, source = sample_atoms(sample.prompt, sample.metadata, self.atoms_file)
        except AtomsError as exc:
            raise JudgeFailure(ErrorCode.bad_input, str(exc)) from None
        parts, facts = await self.media_parts(sample, ctx)
        affinity = self.media_affinity(sample, ctx)
        body = media_body(facts)
        records = await asyncio.gather(*(self._atom(a, sample.prompt, parts, affinity, body) for a in atoms))
        values = [r["probability"] for r in records if r["valid"]]
        failed = [i for i, r in enumerate(records) if not r["valid"]]
        base = {**facts, "atoms": list(records), "atoms_source": source, "answered": len(values),
                "asked": len(records), "counting": self.counting, "normalize": self.normalize, "mean": self.mean}
        if failed and (self.options.on_atom_failure == "invalid" or not values):
            first = records[failed[0]]["error"]
            raise JudgeFailure(ErrorCode(first["code"]), f"{len(failed)} of {len(records)} atom(s) without an "
                               f"answer; atom {failed[0]} ({records[failed[0]]['question']!r:.60}): {first['message']}",
                               details=base)
        means = atom_means(values)
        details = {**base, "soft_tifa_am": means["arithmetic"], "soft_tifa_gm": means["geometric"],
                   "skipped_atoms": failed}
        return Verdict(raw=means[self.mean], details=details)  # a probability: the reward as it is
