"""The shipped RBAC (infra/rbac/*.yaml, applied by the session's real server) on kube-apiserver's own RBAC
authorizer: every ClusterPort operation and the warm cache succeed as each function's identity (the groups
infra/identity.py's EKS access entries give them), the watcher's four calls succeed as the watcher, and
requests outside the roles are refused with 403. The emulator has no authorizer: real server only."""

from __future__ import annotations

import time

import pytest

from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.informer import CacheSettings, ClusterCache
from autoscaler.adapters.kube.node_watch import KubeNodeWatch
from autoscaler.app.ports import ClusterError
from autoscaler.domain.models import Taint
from tests import real_kube
from tests.adapters.contract.conftest import Server
from tests.kube_objects import node, pod
from tests.waiting import wait_for

pytestmark = pytest.mark.contract
FUNCTIONS = ("provisioner", "disruption", "interruption")


@pytest.fixture(params=["real"])
def real(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue("real_server")  # type: ignore[no-any-return]


@pytest.mark.parametrize("identity", FUNCTIONS)
def test_every_cluster_operation_is_allowed_to_the_functions(real: Server, identity: str) -> None:
    ns, name = f"rbac-{identity}", f"rbac-{identity}-node"
    real.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        wait_for(lambda: real.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), what="the namespace")
        real.create("/api/v1/nodes", node(name))
        real.create(f"/api/v1/namespaces/{ns}/pods", pod("bound", namespace=ns, node=name))
        real.create(f"/api/v1/namespaces/{ns}/pods", pod("waiting", namespace=ns))
        cluster = real.cluster(identity)
        cluster.pending_pods()
        cluster.pods()
        cluster.pods(node_name=name)
        cluster.pods(namespace=ns, label_selector="app")
        assert cluster.get_pod(ns, "bound") is not None
        cluster.nodes()
        assert cluster.get_node(name) is not None
        cluster.daemonsets()
        cluster.pdbs()
        cluster.pvcs()
        cluster.pvs()
        cluster.storage_classes()
        assert cluster.namespaces()[ns] is not None
        assert cluster.cordon(name) and cluster.uncordon(name)
        assert cluster.add_taint(name, Taint("karpenter.sh/disrupted", "NoSchedule"))
        assert cluster.remove_taint(name, key="karpenter.sh/disrupted")
        cluster.label_node(name, {"a": "b"})
        cluster.annotate_node(name, {"a": "b"})
        target = cluster.get_node(name)
        assert target is not None
        assert cluster.record_event(target, reason="Test", message="m") is True
        assert cluster.evict(ns, "bound", deadline=time.monotonic() + 5).outcome == "evicted"
        assert cluster.delete_pod(ns, "waiting") is True
        list(cluster.watch_pending_pods(timeout_seconds=1))
        # The warm cache (provisioner and disruption): lists, then watches pods and nodes.
        cache = ClusterCache(cluster, clock=SystemClock(), settings=CacheSettings(quiet_seconds=0.2))
        cluster.cache = cache
        cache.catch_up()
        cluster.pods()
        cluster.nodes()
        cache.catch_up()
        cluster.pods()
        cluster.nodes()
        assert cache.stats.watches >= 2 and not cache.stats.relists, cache.stats
        cluster.cache = None
        assert cluster.delete_node(name) is True
    finally:
        real.request("DELETE", f"/api/v1/namespaces/{ns}")
        real.request("DELETE", f"/api/v1/nodes/{name}")


def test_the_watchers_calls_are_allowed_to_the_watcher(real: Server) -> None:
    cluster = real.cluster("watcher")
    _, version = cluster.list_unbound_pods(lambda item: item)
    list(cluster.watch_unbound_pods_raw(resource_version=version, timeout_seconds=1))
    nodes = KubeNodeWatch(cluster)
    _, version = nodes.list_uninitialized_nodes_raw()
    list(nodes.watch_uninitialized_nodes_raw(resource_version=version, timeout_seconds=1))


@pytest.mark.parametrize(("identity", "method", "path", "body"), [
    # Secrets are nobody's business here.
    ("provisioner", "GET", "/api/v1/secrets", None),
    ("disruption", "GET", "/api/v1/namespaces/kube-system/secrets", None),
    # The functions never create or bind pods (the kube-scheduler places them) nor change workloads.
    ("provisioner", "POST", "/api/v1/namespaces/default/pods", {"metadata": {"name": "x"}}),
    ("provisioner", "POST", "/api/v1/namespaces/default/pods/x/binding", {"target": {"name": "n"}}),
    ("interruption", "DELETE", "/apis/apps/v1/namespaces/default/deployments/x", None),
    ("provisioner", "PATCH", "/api/v1/nodes/x/status", {"status": {}}),
    # The watcher only reads pods and nodes.
    ("watcher", "PATCH", "/api/v1/nodes/x", {"metadata": {"labels": {"a": "b"}}}),
    ("watcher", "DELETE", "/api/v1/namespaces/default/pods/x", None),
    ("watcher", "POST", "/api/v1/namespaces/default/pods/x/eviction", {"metadata": {"name": "x"}}),
    ("watcher", "GET", "/apis/apps/v1/daemonsets", None),
    # An identity without a binding gets nothing.
    ("nobody", "GET", "/api/v1/pods", None),
])
def test_requests_outside_the_roles_are_403(real: Server, identity: str, method: str, path: str,
                                            body: object) -> None:
    ctype = "application/merge-patch+json" if method == "PATCH" else "application/json"
    status, answer = real.request(method, path, body, content_type=ctype, identity=real_kube.IDENTITIES[identity])
    assert status == 403 and answer["reason"] == "Forbidden", answer


def test_the_product_reports_a_refusal_as_a_cluster_error(real: Server) -> None:
    with pytest.raises(ClusterError) as err:
        real.cluster("watcher").daemonsets()
    assert err.value.status == 403 and err.value.reason == "Forbidden"
