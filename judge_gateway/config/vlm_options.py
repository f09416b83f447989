"""Config options of the VLM judge kinds (`[judges.NAME] kind = "yes_no" | "rubric" | ...`,
`options = {...}`): pydantic only, validated at config load; the judges take these objects."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import Strict


_MAX_TOKENS = "Longest reply (default: the template's, else 2048); a reply cut by it is a parse_error."
_STOP = "Stop sequences (default: the template's, else none)."


class VLMOptions(Strict):
    """Options every VLM judge kind takes."""

    shadow_template: str | None = Field(
        None, description="Also score with this pinned template (`family@version`, same kind); its "
        "result goes into details['shadow'], never into the reward."
    )
    video_first_frame: bool = Field(
        False, description="A template with an <image> slot scores a sample that has a video and no "
        "image by the video's first frame (as Flow-Factory's vllm_evaluate does)."
    )


class YesNoOptions(VLMOptions):
    top_logprobs: int = Field(20, ge=1, le=20, description="vLLM's default --max-logprobs is 20.")
    min_answer_mass: float = Field(
        0.5, ge=0.0, le=1.0, description="Below this listed P(yes)+P(no) the score is answer_missing."
    )
    counting: Literal["variants", "exact"] = Field(
        "variants", description="variants: sum every case/space variant of the answer words; exact: "
        "only tokens spelled exactly as the template's words, reward sigmoid(lp_yes - lp_no) "
        "(Flow-Factory vllm_evaluate's default)."
    )


class AspectWeightOptions(VLMOptions):
    """Options of the kinds whose reward is a weighted mean of named parts of the reply (rubric
    aspects, multi-axis axes, checklist probes): the weights and policies are data, tunable with
    `judge-gateway tune rubric` into an aggregation profile."""

    aspect_weights: dict[str, float] | None = Field(
        None, description="Aspect (axis, probe) name -> weight (default: the template's)."
    )
    na_policy: Literal["skip", "value"] = Field(
        "skip", description="skip: leave N/A aspects out of the mean; value: count them as na_value."
    )
    na_value: float | None = Field(None, description="na_policy = value: the score an N/A aspect counts as.")
    missing_policy: Literal["invalid", "skip"] | None = Field(
        None, description="An expected aspect absent from the reply (a probe without an answer) makes the score "
        "invalid, or is left out of the mean (default: the template's, else invalid; checklist: skip). A reply "
        "with no aspect score is invalid either way."
    )
    aggregation_profile: str | None = Field(
        None, description="A tuned aggregation profile file `<name>@<version>.json` (`judge-gateway tune "
        "rubric`): its weights, na_policy and na_value replace aspect_weights/na_policy/na_value."
    )
    aggregation_profile_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="Pin the profile file's exact bytes."
    )
    peer_reading: Literal["flow_factory_rational_rewards_t2i", "flow_factory_rational_rewards_edit"] | None = Field(
        None, description="Also read the reply as that peer's reward model does (Flow-Factory's "
        "RationalRewards T2I / Edit parser and aggregation) into details.peer_reward, whether or not our "
        "parse made the score valid; a Flow-Factory profile with `peer_source = \"details.peer_reward\"` "
        "reports it (docs: Conformance)."
    )

    @model_validator(mode="after")
    def _check(self) -> "AspectWeightOptions":
        if self.na_policy == "value" and self.na_value is None:
            raise ValueError("na_policy = 'value' needs na_value")
        if self.aspect_weights is not None:
            for name, w in self.aspect_weights.items():
                if w < 0:
                    raise ValueError(f"aspect weight {name!r} must be >= 0")
            if not any(w > 0 for w in self.aspect_weights.values()):
                raise ValueError("aspect_weights needs at least one positive weight")
        if self.aggregation_profile is not None and self.aspect_weights is not None:
            raise ValueError("set aspect_weights or aggregation_profile, not both")
        if self.aggregation_profile_sha256 is not None and self.aggregation_profile is None:
            raise ValueError("aggregation_profile_sha256 pins an aggregation_profile; none is set")
        return self


class RubricOptions(AspectWeightOptions):
    scale: tuple[float, float] | None = Field(None, description="Aspect scale (default: the template's).")
    max_tokens: int | None = Field(None, gt=0, description=_MAX_TOKENS)
    temperature: float | None = Field(None, ge=0.0, description="Sampling temperature (default: the template's, else 0).")
    stop: list[str] | None = Field(None, description=_STOP)
    guided_regex: str | None = Field(
        None, description="Constrain the reply with vLLM structured outputs (a regex)."
    )


class MultiAxisOptions(RubricOptions):
    """A multi-axis reply (`Alignment Score (1-5): 4` ...): the rubric's options, on axes."""

    occurrence: Literal["first", "last"] | None = Field(
        None, description="Which of several `label:` lines of one axis counts (default: the template's)."
    )
    soft_score: Literal["none", "score_token"] | None = Field(
        None, description="An axis's value: the number written (none) or VideoScore2's soft score read at that "
        "number's token (score_token) (default: the template's)."
    )
    top_logprobs: int = Field(20, ge=1, le=20, description="Logprobs listed per token where soft_score is "
                              "score_token (vLLM's default --max-logprobs is 20).")


class ChecklistOptions(AspectWeightOptions):
    """N yes/no probes on one medium (docs: judges/vlm.md#checklist-checklist)."""

    top_logprobs: int = Field(20, ge=1, le=20, description="vLLM's default --max-logprobs is 20.")
    min_answer_mass: float = Field(
        0.5, ge=0.0, le=1.0, description="A probe whose listed P(yes)+P(no) is below this has no answer "
        "(answer_missing)."
    )
    counting: Literal["variants", "exact"] = Field(
        "variants", description="As yes_no's: every case/space variant of the answer words, or only the exact words."
    )
    min_answered: int = Field(
        1, ge=1, description="Fewer probes answered than this makes the score invalid (with missing_policy = skip)."
    )


class AnswerProbabilityOptions(VLMOptions):
    """The probability of each atom's expected answer (GenEval 2's Soft-TIFA; docs: judges/vlm.md)."""

    top_logprobs: int = Field(20, ge=1, le=20, description="vLLM's default --max-logprobs is 20.")
    min_answer_mass: float = Field(
        0.5, ge=0.0, le=1.0, description="An atom whose answer set's listed probability is below this has no "
        "answer (answer_missing)."
    )
    counting: Literal["variants", "exact"] | None = Field(
        None, description="Which tokens are the answer (default: the template's): variants, or exact (GenEval 2's list)."
    )
    normalize: Literal["none", "answer_set"] | None = Field(
        None, description="none: the answer's probability as it is (GenEval 2); answer_set: divided by its answer "
        "set's (default: the template's)."
    )
    mean: Literal["arithmetic", "geometric"] | None = Field(
        None, description="The reward over a prompt's atoms: arithmetic (Soft-TIFA AM) or geometric (Soft-TIFA "
        "GM) mean (default: the template's); both are in details."
    )
    atoms_file: str | None = Field(
        None, description="A JSONL file of {prompt, vqa_list: [[question, answer], ...], skills} lines (GenEval 2's "
        "geneval2_data.jsonl as it is), relative to the config file: the atoms of a sample whose metadata has no "
        "vqa_list, found by its prompt."
    )
    on_atom_failure: Literal["invalid", "skip"] = Field(
        "invalid", description="An atom without an answer (answer_missing, a backend error): the sample's score is "
        "invalid, or the atom is left out of the means (and listed in details)."
    )


class FinalScoreOptions(VLMOptions):
    scale: tuple[float, float] | None = Field(
        None, description="[low, high] of the final score; the reward maps it onto [0, 1] (default: the template's)."
    )
    label: str | None = Field(
        None, description="The words before the number, e.g. `Final Score` (default: the template's, else that)."
    )
    occurrence: Literal["last", "first"] = Field(
        "last", description="Which `label:` of a reply that states it more than once counts: the last "
        "(a model that restates its verdict ends with it) or the first (cosmos-rl's unified_reward, a "
        "re.search)."
    )
    peer_regex: str | None = Field(
        None, description="A peer's own pattern for the number (its group 1), matched as the peer's code "
        "matches it (re.search: the first match, case-sensitive). Where it matches, details.peer_score "
        "holds that number, whether or not our parse made the score valid; a cosmos-rl legacy key with "
        "`peer_source = \"details.peer_score\"` reports it (cosmos-rl's unified_reward: "
        "`Final Score:\\s*([1-5](?:\\.\\d+)?)`)."
    )
    max_tokens: int | None = Field(None, gt=0, description=_MAX_TOKENS)
    temperature: float | None = Field(None, ge=0.0, description="Sampling temperature (default: the template's, else 0).")
    stop: list[str] | None = Field(None, description=_STOP)
    guided_regex: str | None = Field(None, description="Constrain the reply with vLLM structured outputs (a regex).")

    @field_validator("peer_regex")
    @classmethod
    def _peer_regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                groups = re.compile(v).groups
            except re.error as err:
                raise ValueError(f"not a regular expression: {err}") from None
            if groups < 1:
                raise ValueError("needs a group around the number")
        return v


class CriticOptions(VLMOptions):
    """A critic: the reply is one JSON object in the template's schema (docs: judges/critic.md)."""

    reward_field: str = Field(
        "video_analysis.physical_accuracy.score", pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$",
        description="Dotted path of the reply's number that becomes the reward (a number field of the "
        "template's schema; its minimum/maximum, when set, map it onto [0, 1])."
    )
    structured_outputs: bool = Field(
        True, description="Send the template's schema as vLLM structured outputs (`json`); the reply is "
        "checked against it either way."
    )
    on_bad_timestamp: Literal["flag", "invalid"] = Field(
        "flag", description="A violation timed outside the clip the judge saw: flag it (valid_time = "
        "false, counted in details['bad_violation_times']) or make the score invalid (parse_error)."
    )
    share_video_with: str | None = Field(
        None, description="Use this judge's [video] sampling, so a request scoring both encodes each "
        "clip once (the critic's own `video` table must then be left out)."
    )
    max_tokens: int | None = Field(None, gt=0, description=_MAX_TOKENS)
    temperature: float | None = Field(None, ge=0.0, description="Sampling temperature (default: the template's, else 0).")
    stop: list[str] | None = Field(None, description=_STOP)
