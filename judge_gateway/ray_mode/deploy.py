"""Deploy the gateway on a Ray cluster (`judge-gateway serve --ray`) and report on it
(`judge-gateway ray-status`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray
from ray import serve
from ray.serve.config import HTTPOptions

from ..config import GatewayConfig
from ..config import RayConfig, RayDeploymentConfig
from ..exceptions import ConfigurationError
from .heads import HeadReplica
from .ingress import GatewayIngress

GATEWAY_DEPLOYMENT = "gateway"


def head_deployment_name(judge: str) -> str:
    return f"head-{judge}"


def _options(name: str, d: RayDeploymentConfig) -> dict[str, Any]:
    actor: dict[str, Any] = {"num_cpus": d.num_cpus, "num_gpus": d.num_gpus}
    if d.runtime_env:
        actor["runtime_env"] = d.runtime_env
    opts: dict[str, Any] = {"name": name, "ray_actor_options": actor, "max_ongoing_requests": d.max_ongoing_requests}
    if d.autoscaling is not None:
        a = d.autoscaling
        opts["autoscaling_config"] = {"min_replicas": a.min_replicas, "max_replicas": a.max_replicas,
                                      "target_ongoing_requests": a.target_ongoing_requests}
    else:
        opts["num_replicas"] = d.num_replicas or 1
    return opts


def build_application(cfg: GatewayConfig, api_keys: list[str]) -> Any:
    """The Serve application: one deployment per [ray.heads] judge, the gateway ingress over them.
    Colocated judges are refused: several gateway replicas would each put the same servers to sleep
    (and the ingress's config, its dump, carries no residency)."""
    colocated = [n for n, j in cfg.judges.items() if j.residency.colocated]
    if colocated:
        raise ConfigurationError(f"judges {', '.join(colocated)} are colocated (residency): Ray mode serves "
                                 "resident judges only")
    rc = _ray_section(cfg)
    heads = {name: HeadReplica.options(**_options(head_deployment_name(name), d))
             .bind(name, cfg.judges[name].kind, cfg.judges[name].options)
             for name, d in rc.heads.items()}
    config_data = cfg.model_dump(mode="json", exclude_unset=False)
    return GatewayIngress.options(**_options(GATEWAY_DEPLOYMENT, rc.gateway)).bind(config_data, heads, api_keys)


def _ray_section(cfg: GatewayConfig) -> RayConfig:
    return cfg.ray if cfg.ray is not None else RayConfig()


def connect(rc: RayConfig, address: str | None = None) -> None:
    if not ray.is_initialized():
        ray.init(address=address or rc.address, namespace=rc.namespace, log_to_driver=False)


def deploy(cfg: GatewayConfig, api_keys: list[str], address: str | None = None) -> str:
    """Deploy (or update) the application and wait until it runs; return its URL."""
    rc = _ray_section(cfg)
    connect(rc, address)
    # One proxy, on the head node: several nodes on one host would fight over the port.
    serve.start(proxy_location="HeadOnly", http_options=HTTPOptions(host=rc.http_host, port=rc.http_port))
    serve.run(build_application(cfg, api_keys), name=rc.app_name, route_prefix="/", blocking=False)
    return f"http://{rc.http_host}:{rc.http_port}"


@dataclass
class ReplicaStatus:
    replica_id: str
    state: str
    node_ip: str | None
    pid: int | None
    ongoing_requests: int | None  # queued + running on this replica (None: it did not answer)


@dataclass
class DeploymentStatus:
    name: str
    status: str
    replicas: list[ReplicaStatus] = field(default_factory=list)

    @property
    def queue_depth(self) -> int:
        return sum(r.ongoing_requests or 0 for r in self.replicas)


def status(app_name: str, timeout_s: float = 5.0) -> tuple[str, list[DeploymentStatus]]:
    """The application's status and, per deployment, its replicas with their queue depth."""
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeInstanceDetails

    details = ServeInstanceDetails(**_get_global_client().get_serve_details())
    app = details.applications.get(app_name)
    if app is None:
        raise ValueError(f"no Serve application {app_name!r} on this cluster "
                         f"(running: {', '.join(details.applications) or 'none'})")
    out = []
    for name, dep in app.deployments.items():
        replicas = []
        for r in dep.replicas:
            depth = None
            if r.state.value == "RUNNING" and r.actor_name:
                try:
                    actor = ray.get_actor(r.actor_name, namespace="serve")
                    depth = ray.get(actor.get_num_ongoing_requests.remote(), timeout=timeout_s)
                except (ray.exceptions.RayError, ValueError):  # going away: its depth is unknown, not 0
                    depth = None
            replicas.append(ReplicaStatus(r.replica_id, r.state.value, r.node_ip, r.pid, depth))
        out.append(DeploymentStatus(name, dep.status.value, replicas))
    return app.status.value, out


def format_status(app_name: str, app_status: str, deployments: list[DeploymentStatus]) -> str:
    lines = [f"application {app_name}: {app_status}"]
    for d in deployments:
        lines.append(f"  deployment {d.name:24s} {d.status:10s} replicas={len(d.replicas)} queue={d.queue_depth}")
        for r in d.replicas:
            depth = "?" if r.ongoing_requests is None else r.ongoing_requests
            lines.append(f"    replica {r.replica_id:12s} {r.state:10s} node={r.node_ip} pid={r.pid} ongoing={depth}")
    return "\n".join(lines)
