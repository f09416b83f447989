"""The base of the config's models, the lowest module of config/ (it imports none of the others)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A section that refuses keys it does not know: a misspelt key is an error that names it."""

    model_config = ConfigDict(extra="forbid")
