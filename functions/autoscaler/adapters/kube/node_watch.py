"""The watcher's list+watch of our nodes waiting for initialisation (``domain/node_wake.py``'s label
selector) on the Kubernetes API, through ``KubeCluster``'s paginated list and watch stream: errors arrive as
``ClusterError`` (410 Gone included) exactly as for the unbound-pod stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.domain.node_wake import NODE_WAKE_SELECTOR

if TYPE_CHECKING:
    from autoscaler.app.ports import UninitializedNodeWatch

NODES_PATH = "/api/v1/nodes"


def _raw(node: dict[str, Any]) -> dict[str, Any]:
    return node


class KubeNodeWatch:
    def __init__(self, cluster: KubeCluster) -> None:
        self._cluster = cluster

    def list_uninitialized_nodes_raw(self) -> tuple[list[dict[str, Any]], str]:
        return self._cluster.list_parsed(NODES_PATH, _raw, label_selector=NODE_WAKE_SELECTOR)

    def watch_uninitialized_nodes_raw(self, *, resource_version: str,
                                      timeout_seconds: float) -> Iterator[dict[str, Any]]:
        return self._cluster.watch_raw(NODES_PATH, resource_version=resource_version,
                                       timeout_seconds=timeout_seconds, label_selector=NODE_WAKE_SELECTOR)


if TYPE_CHECKING:
    def _implements_port(w: KubeNodeWatch) -> UninitializedNodeWatch:
        return w
