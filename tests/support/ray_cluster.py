"""A two-node Ray cluster on this machine (ray.cluster_utils.Cluster, CPU only) for the Ray mode
tests. Both nodes are processes here; the replicas spread over them as on two hosts. Logical CPUs
are what Serve schedules by (the machine's cores are shared by everything)."""

from __future__ import annotations

import ray
from ray.cluster_utils import Cluster

OBJECT_STORE_BYTES = 256 * 1024 * 1024


class LocalRayCluster:
    def __init__(self, num_cpus_per_node: int = 4, namespace: str = "judge-gateway") -> None:
        node = {"num_cpus": num_cpus_per_node, "object_store_memory": OBJECT_STORE_BYTES}
        self.cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
        try:
            self.worker_node = self.cluster.add_node(**node)
            self.cluster.wait_for_nodes()
            ray.init(address=self.cluster.address, namespace=namespace, log_to_driver=False)
        except BaseException:  # no half-started cluster left running behind a failed fixture
            ray.shutdown()
            self.cluster.shutdown()
            raise

    @property
    def address(self) -> str:
        return self.cluster.address

    def node_ips_and_ids(self) -> list[str]:
        return [n["NodeID"] for n in ray.nodes() if n["Alive"]]

    def shutdown(self) -> None:
        from ray import serve

        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            self.cluster.shutdown()


def kill_replica(actor_name: str) -> None:
    """Kill a Serve replica's actor process outright (as a lost node would); Serve starts another."""
    ray.kill(ray.get_actor(actor_name, namespace="serve"), no_restart=True)


def gateway_test_config(vllm_url: str, redis_url: str, http_port: int, *, gateway_replicas: int = 2,
                        ocr_replicas: int = 2) -> dict:
    """The OCR head and a VLM judge on the real CPU vLLM; cosmos-rl on; the shared Redis store; and
    a [ray] section with small replicas (the machine has 2 cores)."""
    return {
        "backends": {"qwen_vl": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [vllm_url],
                                 "timeout_s": 120, "max_concurrency": 8}},
        "judges": {
            "image_quality": {"kind": "yes_no", "backend": "qwen_vl", "template": "image_quality@1",
                              "image": {"max_pixels": 50176}},
            "ocr": {"kind": "ocr", "default": False, "options": {"device": "cpu", "max_batch_size": 8}},
        },
        # The durable queue: a killed gateway replica's accepted uuids are claimed by the other
        # once idle 5 s (without it, 7 of 23 ended "failed" in the kill run).
        "store": {"kind": "redis", "url": redis_url, "queue": {"enabled": True, "visibility_timeout_s": 5.0}},
        "ray": {"http_port": http_port,
                "gateway": {"num_replicas": gateway_replicas, "num_cpus": 0.5},
                "heads": {"ocr": {"num_replicas": ocr_replicas, "num_cpus": 0.5}}},
    }
