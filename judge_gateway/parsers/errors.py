"""The one error every parser raises when a reply carries no trustworthy answer."""

from __future__ import annotations

from typing import Any

from ..exceptions import ScoringFailed

# Codes shared with the score schema (`judge_gateway.schema.ErrorCode`); kept as plain strings
# so the parsers stay importable without pydantic.
PARSE_ERROR = "parse_error"
ANSWER_MISSING = "answer_missing"
_CODES = frozenset({PARSE_ERROR, ANSWER_MISSING})


class ParseError(ScoringFailed, ValueError):
    """The reply has no trustworthy answer. `code` is the schema error code.

    `details` holds partial facts worth reporting with the invalid score (the answer mass of a
    yes/no reply, the aspects found so far in a rubric), so a failure stays explainable.
    """

    code: str
    details: dict[str, Any]

    def __init__(
        self,
        message: str,
        *,
        code: str = PARSE_ERROR,
        details: dict[str, Any] | None = None,
    ) -> None:
        if code not in _CODES:
            raise ValueError(f"unknown parse error code {code!r}; expected one of {sorted(_CODES)}")
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = dict(details) if details else {}

    def __repr__(self) -> str:
        return f"ParseError({self.message!r}, code={self.code!r})"
