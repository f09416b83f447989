"""The [ray] config section: how `judge-gateway serve --ray` lays the service out on Ray Serve.

    [ray]                      cluster address, Serve's HTTP proxy, the application's name
    [ray.gateway]              the gateway ingress deployment (the same FastAPI app, N replicas)
    [ray.heads.JUDGE]          a head judge run as its own deployment, reached by handle

Plain data, no Ray import: the config loads (and is checked) where Ray is not installed.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from .base import Strict


class RayAutoscaling(Strict):
    min_replicas: int = Field(1, ge=0, description="Fewest replicas Serve keeps.")
    max_replicas: int = Field(1, ge=1, description="Most replicas Serve starts.")
    target_ongoing_requests: float = Field(
        8.0, gt=0, description="Requests in flight per replica that Serve's autoscaler aims for.")

    @model_validator(mode="after")
    def _bounds(self) -> RayAutoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas = {self.min_replicas} exceeds max_replicas = {self.max_replicas}")
        return self


class RayDeploymentConfig(Strict):
    num_replicas: int | None = Field(None, ge=1, description="Fixed replica count (default 1; not with autoscaling).")
    autoscaling: RayAutoscaling | None = Field(None, description="Replica bounds for Serve's autoscaler.")
    num_cpus: float = Field(1.0, ge=0, description="CPUs Ray reserves per replica.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs Ray reserves per replica (a head on `cuda` needs one).")
    max_ongoing_requests: int = Field(
        64, ge=1, description="Requests one replica takes at once; a head replica batches them together.")
    runtime_env: dict[str, Any] = Field(
        default_factory=dict,
        description="Ray runtime environment of the replica (env_vars, py_executable, ...). A head's worker "
                    "runs under its own `options.python` either way.")

    @model_validator(mode="after")
    def _one_scaling(self) -> RayDeploymentConfig:
        if self.num_replicas is not None and self.autoscaling is not None:
            raise ValueError("set num_replicas or autoscaling, not both")
        return self

    def replica_bounds(self) -> tuple[int, int]:
        if self.autoscaling is not None:
            return self.autoscaling.min_replicas, self.autoscaling.max_replicas
        n = self.num_replicas or 1
        return n, n


class RayConfig(Strict):
    address: str = Field("auto", description="Ray cluster to deploy on (`auto`, `HOST:6379`, `ray://HOST:10001`).")
    namespace: str = Field("judge-gateway", description="Ray namespace of the deployment.")
    app_name: str = Field("judge-gateway", min_length=1, description="Serve application name.")
    http_host: str = Field("127.0.0.1", description="Where Serve's HTTP proxy binds (on the head node).")
    http_port: int = Field(8000, ge=1, le=65535, description="Port of Serve's HTTP proxy.")
    gateway: RayDeploymentConfig = Field(
        default_factory=RayDeploymentConfig, description="The gateway ingress deployment (the same FastAPI app)."
    )
    heads: dict[str, RayDeploymentConfig] = Field(
        default_factory=dict,
        description="Head judges run as their own Serve deployments; the others stay inside each gateway replica.")
    head_call_retries: int = Field(
        2, ge=0, description="A head call whose replica died is sent again (to another replica) this many times.")


def check_ray(ray: RayConfig | None, head_judges: set[str], all_judges: set[str], store_kind: str,
              cosmos_enabled: bool, queue_enabled: bool = False) -> list[str]:
    """Cross-section problems of [ray], each naming its key."""
    if ray is None:
        return []
    problems = []
    for name in ray.heads:
        if name not in all_judges:
            problems.append(f"ray.heads.{name}: no such judge (configured: {', '.join(sorted(all_judges)) or 'none'})")
        elif name not in head_judges:
            problems.append(f"ray.heads.{name}: not a head judge (VLM judges stay URLs of vLLM servers)")
    if cosmos_enabled and ray.gateway.replica_bounds()[1] > 1 and store_kind != "redis":
        # Pulls land on any replica: an in-memory store would answer `unknown` for another's uuid.
        problems.append(f"ray.gateway: {ray.gateway.replica_bounds()[1]} replicas serving cosmos-rl need "
                        "store.kind = \"redis\" (each replica's memory store holds only its own uuids)")
    elif cosmos_enabled and ray.gateway.replica_bounds()[1] > 1 and not queue_enabled:
        # Without the durable queue a dead replica's accepted uuids end "failed" (measured: 7 of 23).
        problems.append(f"ray.gateway: {ray.gateway.replica_bounds()[1]} replicas serving cosmos-rl need "
                        "store.queue.enabled = true (else the accepted work of a replica that dies is lost)")
    return problems
