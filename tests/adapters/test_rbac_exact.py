"""The shipped ClusterRole grants exactly the Kubernetes calls the adapter makes: every ClusterPort
operation is run against the emulator, each request it served is turned into the (API group,
resource, verb) RBAC would check, and that set must equal the manifest's rules."""

from __future__ import annotations

import inspect
import re
import time
from collections import Counter
from pathlib import Path

import yaml

from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.adapters.kube.informer import ClusterCache
from autoscaler.adapters.kube.node_watch import KubeNodeWatch
from autoscaler.app.ports import ClusterPort, UnboundPodWatch, UninitializedNodeWatch
from autoscaler.domain.models import Taint
from simulator.kube_api import KubeApiServer, client_for
from tests.kube_objects import node, pod

MANIFEST = Path(__file__).resolve().parents[2] / "infra" / "rbac" / "autoscaler-clusterrole.yaml"
WATCHER_MANIFEST = MANIFEST.with_name("watcher-clusterrole.yaml")
_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/[^/]+)?/(?P<resource>[^/]+)"
                   r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")
_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def _rbac(method: str, path: str, *, watched: bool) -> tuple[str, str, str]:
    m = _PATH.match(path)
    assert m, path
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    verb = ("watch" if watched else "get" if m["name"] else "list") if method == "GET" else _VERBS[method]
    return (m["group"] or "", resource, verb)


def _granted(manifest: Path = MANIFEST) -> set[tuple[str, str, str]]:
    role = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "ClusterRole")
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def _exercise(cluster: KubeCluster, server: KubeApiServer) -> set[str]:
    """Call every ClusterPort operation once; returns the names called."""
    server.store.create("nodes", node("n1"))
    server.store.create("pods", pod("bound", node="n1"))
    server.store.create("pods", pod("waiting"))
    called = {
        "pending_pods": cluster.pending_pods(), "pods": cluster.pods(), "get_pod": cluster.get_pod("default", "bound"),
        "nodes": cluster.nodes(), "get_node": cluster.get_node("n1"), "daemonsets": cluster.daemonsets(),
        "pdbs": cluster.pdbs(), "pvcs": cluster.pvcs(), "pvs": cluster.pvs(),
        "storage_classes": cluster.storage_classes(), "namespaces": cluster.namespaces(),
        "cordon": cluster.cordon("n1"),
        "uncordon": cluster.uncordon("n1"),
        "add_taint": cluster.add_taint("n1", Taint("karpenter.sh/disrupted", "NoSchedule")),
        "remove_taint": cluster.remove_taint("n1", key="karpenter.sh/disrupted"),
        "label_node": cluster.label_node("n1", {"a": "b"}), "annotate_node": cluster.annotate_node("n1", {"a": "b"}),
        "evict": cluster.evict("default", "bound", deadline=time.monotonic() + 5),
        "delete_pod": cluster.delete_pod("default", "waiting"),
        "record_event": cluster.record_event(cluster.nodes()[0], reason="Test", message="m"),
        "watch_pending_pods": list(cluster.watch_pending_pods(timeout_seconds=0.2)),
        "delete_node": cluster.delete_node("n1"),
    }
    # The provisioner's and the disruption function's warm cache lists, then watches, pods and nodes.
    cluster.cache = ClusterCache(cluster, clock=SystemClock())
    cluster.cache.catch_up()
    cluster.pods(), cluster.nodes()
    cluster.cache.catch_up()
    cluster.pods(), cluster.nodes()
    assert cluster.cache.stats.watches >= 2
    cluster.cache = None
    return set(called)


def test_cluster_role_grants_exactly_what_the_adapter_uses(kube_api: KubeApiServer) -> None:
    called = _exercise(KubeCluster(client_for(kube_api.url)), kube_api)
    operations = {n for n, _ in inspect.getmembers(ClusterPort, inspect.isfunction) if not n.startswith("_")}
    assert operations <= called, f"exercise the new ClusterPort operations too: {sorted(operations - called)}"
    # A watch is served as a GET of the collection: take the watches out of the GETs before mapping.
    served = Counter(kube_api.store.requests)
    served.subtract(Counter(("GET", p) for p in kube_api.store.watches))
    used = {_rbac(m, p, watched=False) for (m, p), n in served.items() if n > 0}
    used |= {_rbac("GET", p, watched=True) for p in kube_api.store.watches}
    assert used == _granted(), (f"missing from the ClusterRole: {sorted(used - _granted())}; "
                                f"granted but unused: {sorted(_granted() - used)}")


def test_watcher_cluster_role_grants_exactly_what_the_watcher_uses(kube_api: KubeApiServer) -> None:
    # Given the watcher's four calls (its ports, UnboundPodWatch and UninitializedNodeWatch) on the emulator
    cluster = KubeCluster(client_for(kube_api.url))
    kube_api.store.create("pods", pod("waiting"))
    port: UnboundPodWatch = cluster
    _, version = port.list_unbound_pods(dict)
    list(port.watch_unbound_pods_raw(resource_version=version, timeout_seconds=1))
    nodes: UninitializedNodeWatch = KubeNodeWatch(cluster)
    _, version = nodes.list_uninitialized_nodes_raw()
    list(nodes.watch_uninitialized_nodes_raw(resource_version=version, timeout_seconds=1))
    # Then the RBAC verbs they need are exactly the watcher's ClusterRole
    served = Counter(kube_api.store.requests)
    served.subtract(Counter(("GET", p) for p in kube_api.store.watches))
    used = {_rbac(m, p, watched=False) for (m, p), n in served.items() if n > 0}
    used |= {_rbac("GET", p, watched=True) for p in kube_api.store.watches}
    assert used == _granted(WATCHER_MANIFEST) == {("", "pods", "list"), ("", "pods", "watch"),
                                                  ("", "nodes", "list"), ("", "nodes", "watch")}
