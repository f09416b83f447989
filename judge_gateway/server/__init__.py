"""HTTP service: the native API (and, later, the protocol adapters) over one Gateway."""

from .app import create_app

__all__ = ["create_app"]
