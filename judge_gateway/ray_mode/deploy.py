"""Deploy the gateway on a Ray cluster (`judge-gateway serve --ray`) and report on it
(`judge-gateway ray-status`)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray import serve
from ray.serve.config import HTTPOptions

from ..config import GatewayConfig
from ..config import RayConfig, RayDeploymentConfig
from ..exceptions import ConfigurationError, Unavailable
from .heads import HeadReplica
from .ingress import GatewayIngress

GATEWAY_DEPLOYMENT = "gateway"
# How long `deploy` waits for Serve's HTTP proxy to come up after its first start failed.
PROXY_START_WAIT_S = 300.0

log = logging.getLogger(__name__)


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
    start_serve(rc)
    serve.run(build_application(cfg, api_keys), name=rc.app_name, route_prefix="/", blocking=False)
    return f"http://{rc.http_host}:{rc.http_port}"


def start_serve(rc: RayConfig, wait_s: float = PROXY_START_WAIT_S) -> None:
    """Start Serve (its controller and one HTTP proxy, on the head node: several nodes on one host
    would fight over the port) and return once the proxy is healthy.

    Serve gives a new proxy 5 s to answer its ready check. On a busy head node it can miss that:
    the controller then kills it and starts another with a longer check, while `serve.start`, which
    waits on the first proxy only, raises. That is a slow start, not a failed deploy: wait for the
    replacement, up to `wait_s`, and raise only if no proxy becomes healthy."""
    http = HTTPOptions(host=rc.http_host, port=rc.http_port)
    try:
        serve.start(proxy_location="HeadOnly", http_options=http)
        return
    except (ray.exceptions.RayError, TimeoutError) as exc:
        first: BaseException = exc
    log.warning("Serve's HTTP proxy did not start at the first try (%s); waiting up to %.0f s for the one "
                "the Serve controller starts in its place", type(first).__name__, wait_s)
    deadline = time.monotonic() + wait_s
    last = "no answer from the Serve controller"
    while time.monotonic() < deadline:
        try:
            serve.start(proxy_location="HeadOnly", http_options=http)  # connects to the running controller
            proxies = {node: str(getattr(s, "value", s)) for node, s in serve.status().proxies.items()}
            if any(s == "HEALTHY" for s in proxies.values()):
                return
            last = f"proxies: {proxies or 'none yet'}"
        except (ray.exceptions.RayError, TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(1.0)
    raise Unavailable(f"Serve's HTTP proxy did not become healthy within {wait_s:.0f} s of a failed "
                      f"start ({type(first).__name__}); last seen: {last}") from first


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
