"""The cosmos-rl reward service protocol over one Gateway (POST /api/reward/...)."""

from .service import CosmosRLService, install

__all__ = ["CosmosRLService", "install"]
