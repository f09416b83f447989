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
        self.worker_node = self.cluster.add_node(**node)
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, namespace=namespace, log_to_driver=False)

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
