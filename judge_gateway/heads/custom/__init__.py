"""Heads you bring: a class named by import path, run in the head's own worker process and venv
with everything a built-in head gets (cross-request batching, supervision and restart, readiness,
metrics, Ray deployment).

Your class's interface (import these in your module; numpy and pydantic only):
  `CustomHead` (optional base), `HeadContext`, `Item`, `ItemScore`: api.py.
The rest, by side:
  gateway  `judge` (CustomJudge: a sample -> one item; groups for a groupwise head)
  worker   `model` (the HeadModel over a scorer, ItemBatcher, `kind = "custom"`), `loading`
           (importing the class, validating its options), `flow_factory` (Flow-Factory reward
           models, unchanged), `cosmos_rl` (cosmos-rl reward handlers, unchanged)
"""

from .api import CustomHead, HeadContext, Item, ItemScore

__all__ = ["CustomHead", "HeadContext", "Item", "ItemScore"]
