"""Issue 33 item 7 on the live path: the cluster's namespaces reach the planner (read only when a pod's
pod (anti-)affinity has a namespaceSelector), through the real Kubernetes adapter on the emulator."""

from __future__ import annotations

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.cluster_state import gather_plan_input
from simulator.kube_api import KubeApiServer, client_for
from tests.kube_objects import pod


def _namespace_lists(kube_api: KubeApiServer) -> int:
    return sum(1 for method, path in kube_api.store.requests if method == "GET" and path == "/api/v1/namespaces")


def test_issue33_item_7_namespaces_are_read_for_a_namespace_selector(kube_api: KubeApiServer,
                                                                     cloud: AwsCloud) -> None:
    cluster = KubeCluster(client_for(kube_api.url))
    kube_api.store.create("namespaces", {"metadata": {"name": "team-a", "labels": {"tier": "data"}}})
    kube_api.store.create("pods", pod("plain"))
    # Given no pod selects namespaces by label: they are not listed
    snap = gather_plan_input(cluster=cluster, cloud=cloud, node_pools=[], node_classes={})
    assert snap.namespaces == {} and _namespace_lists(kube_api) == 0
    # Given a pending pod whose anti-affinity has a namespaceSelector: they are, with their labels
    selecting = pod("cache")
    selecting["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}},
        "namespaceSelector": {"matchLabels": {"tier": "data"}}}]}}
    kube_api.store.create("pods", selecting)
    snap = gather_plan_input(cluster=cluster, cloud=cloud, node_pools=[], node_classes={})
    assert snap.namespaces["team-a"] == {"tier": "data", "kubernetes.io/metadata.name": "team-a"}
    assert _namespace_lists(kube_api) == 1
