"""HTTP service: the native API and the protocol adapters (cosmos-rl, Flow-Factory) over one Gateway."""

from .app import create_app

__all__ = ["create_app"]
