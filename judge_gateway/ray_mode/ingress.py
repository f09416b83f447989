"""The gateway as a Ray Serve ingress: each replica serves the same FastAPI app as `serve` does on
one machine (create_app), with its head judges that run as deployments reached by handle. VLM
judges stay URLs of vLLM servers, balanced by each replica's BackendPool. Replicas share what the
async protocols store through the configured [store] (Redis)."""

from __future__ import annotations

from typing import Any

from ray import serve

from ..config import validate_config
from ..gateway import Gateway
from ..server import create_app
from .heads import attach_remote_heads


@serve.deployment
@serve.ingress()
class GatewayIngress:
    def __init__(self, config_data: dict[str, Any], head_handles: dict[str, Any], api_keys: list[str]) -> None:
        cfg = validate_config(config_data, source="[ray] gateway replica")
        self.gateway = Gateway(cfg)
        assert cfg.ray is not None
        attach_remote_heads(self.gateway, head_handles, cfg.ray.head_call_retries)
        self.api_keys = api_keys

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(self.gateway, api_keys=self.api_keys)
