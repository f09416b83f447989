"""The head kinds' config options live in `judge_gateway.head_options` (beside config, which must
not import `heads/`); these names stay importable from here."""

from ..head_options import (  # noqa: F401
    HEAD_KIND_OPTIONS,
    HEAD_KINDS,
    ClipOptions,
    GenEvalOptions,
    HeadOptions,
    HPSv2Options,
    HPSv3Options,
    ImageRewardOptions,
    ImageRewardVit,
    OcrOptions,
    PickScoreOptions,
    VideoAlignOptions,
)
