"""KubeCluster against the Kubernetes API emulator, over HTTP with the official client."""

from __future__ import annotations

import threading
import time

import pytest

from autoscaler.adapters.clock import ManualClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.ports import ClusterError, ClusterPort, NotFoundError
from autoscaler.domain.models import Taint
from simulator.kube_api import KubeApiServer, client_for
from tests.kube_objects import node, pdb, pod


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def cluster(kube_api: KubeApiServer, clock: ManualClock) -> KubeCluster:
    # Sleeping moves the manual clock: backoffs cost no wall time and deadlines are exact.
    return KubeCluster(client_for(kube_api.url), clock=clock, sleep=clock.advance, page_size=3,
                       backoff_base=1.0, backoff_max=4.0)


def test_kube_cluster_implements_the_port(cluster: KubeCluster) -> None:
    port: ClusterPort = cluster
    assert port is cluster


def test_reads_parse_every_kind(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    st = kube_api.store
    st.create("nodes", node("n1", labels={"pool": "a"}))
    st.create("nodes", node("n2", labels={"pool": "b"}))
    st.create("pods", pod("bound", node="n1", labels={"app": "web"}))
    st.create("pods", pod("waiting", labels={"app": "web"}))
    st.create("pods", pod("done", phase="Succeeded"))
    st.create("pods", pod("other-ns", namespace="team", node="n2", labels={"app": "db"}))
    st.create("daemonsets", {"metadata": {"name": "agent", "namespace": "kube-system"},
                             "spec": {"template": {"spec": {"containers": [
                                 {"name": "a", "resources": {"requests": {"cpu": "50m"}}}]}}}})
    st.create("poddisruptionbudgets", pdb("web", match={"app": "web"}, min_available="50%"))
    st.create("persistentvolumeclaims", {"metadata": {"name": "data", "namespace": "team"},
                                         "spec": {"storageClassName": "gp3", "volumeName": "pv-1"}})
    st.create("persistentvolumes", {"metadata": {"name": "pv-1"}, "spec": {"nodeAffinity": {"required": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]}]}]}}}})
    st.create("storageclasses", {"metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com",
                                 "volumeBindingMode": "WaitForFirstConsumer"})
    st.create("namespaces", {"metadata": {"name": "data-team", "labels": {"tier": "data"}}})

    assert [p.key for p in cluster.pending_pods()] == ["default/waiting"]
    assert sorted(p.key for p in cluster.pods()) == ["default/bound", "default/done", "default/waiting",
                                                     "team/other-ns"]
    assert [p.key for p in cluster.pods(node_name="n1")] == ["default/bound"]
    assert sorted(p.key for p in cluster.pods(label_selector="app in (web,db),app!=db")) == [
        "default/bound", "default/waiting"]
    assert [p.key for p in cluster.pods(namespace="team")] == ["team/other-ns"]
    assert cluster.get_pod("default", "bound") is not None
    assert cluster.get_pod("default", "missing") is None
    assert [n.name for n in cluster.nodes()] == ["n1", "n2"]
    assert [n.name for n in cluster.nodes(label_selector="pool=b")] == ["n2"]
    n1 = cluster.get_node("n1")
    assert n1 is not None and n1.allocatable["cpu"] == 4000 and n1.ready
    assert cluster.get_node("nope") is None
    assert [(d.namespace, d.name, d.template.requests["cpu"]) for d in cluster.daemonsets()] == [
        ("kube-system", "agent", 50)]
    assert [(p.name, p.min_available) for p in cluster.pdbs()] == [("web", "50%")]
    assert [(c.name, c.storage_class, c.volume_name) for c in cluster.pvcs()] == [("data", "gp3", "pv-1")]
    assert [(v.name, v.zones) for v in cluster.pvs()] == [("pv-1", ("us-east-1b",))]
    assert [(s.name, s.volume_binding_mode) for s in cluster.storage_classes()] == [
        ("gp3", "WaitForFirstConsumer")]
    namespaces = cluster.namespaces()
    # As kube-apiserver does, every namespace carries its own name as a label.
    assert namespaces["data-team"] == {"tier": "data", "kubernetes.io/metadata.name": "data-team"}
    assert "team" in namespaces


def test_lists_follow_continue_tokens_across_pages(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    for i in range(10):
        kube_api.store.create("pods", pod(f"p{i:02d}"))
    before = len(kube_api.store.requests)
    names = [p.name for p in cluster.pending_pods()]
    pages = [path for _, path in kube_api.store.requests[before:]]
    assert names == [f"p{i:02d}" for i in range(10)]
    assert len(pages) == 4  # 3 + 3 + 3 + 1 with page_size=3


@pytest.mark.parametrize("status", [429, 500, 503])
def test_reads_retry_transient_errors(kube_api: KubeApiServer, cluster: KubeCluster, clock: ManualClock,
                                      status: int) -> None:
    kube_api.store.create("nodes", node("n1"))
    kube_api.inject_error("/api/v1/nodes", status, 2)
    assert [n.name for n in cluster.nodes()] == ["n1"]
    assert clock.mono == pytest.approx(1.0 + 2.0)  # two backoffs: 1s then 2s


def test_reads_give_up_after_bounded_retries(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    kube_api.inject_error("/api/v1/nodes", 500, 10)
    with pytest.raises(ClusterError, match="HTTP 500") as err:
        cluster.nodes()
    assert err.value.status == 500


def test_client_errors_are_not_retried(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    before = len(kube_api.store.requests)
    with pytest.raises(ClusterError, match="is not valid") as err:
        cluster.pods(label_selector="app in (x")
    assert err.value.status == 400
    assert len(kube_api.store.requests) == before + 1
    kube_api.inject_error("/api/v1/nodes", 403, 1)
    with pytest.raises(ClusterError, match="HTTP 403"):
        cluster.nodes()


def test_cordon_and_uncordon_are_idempotent(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    kube_api.store.create("nodes", node("n1"))
    assert cluster.cordon("n1") is True
    assert cluster.cordon("n1") is False
    assert kube_api.store.get("nodes", None, "n1")["spec"]["unschedulable"] is True
    assert cluster.uncordon("n1") is True
    assert cluster.uncordon("n1") is False
    assert "unschedulable" not in kube_api.store.get("nodes", None, "n1")["spec"]
    with pytest.raises(NotFoundError):
        cluster.cordon("ghost")


def test_taints_are_added_and_removed_idempotently(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    kube_api.store.create("nodes", node("n1", taints=[{"key": "keep", "effect": "NoSchedule"}]))
    disrupted = Taint("karpenter.sh/disrupted", "NoSchedule")
    assert cluster.add_taint("n1", disrupted) is True
    assert cluster.add_taint("n1", disrupted) is False
    assert cluster.add_taint("n1", Taint("karpenter.sh/disrupted", "NoSchedule", "v2")) is True
    taints = kube_api.store.get("nodes", None, "n1")["spec"]["taints"]
    assert taints == [{"key": "keep", "effect": "NoSchedule"},
                      {"key": "karpenter.sh/disrupted", "effect": "NoSchedule", "value": "v2"}]
    assert cluster.remove_taint("n1", key="karpenter.sh/disrupted") is True
    assert cluster.remove_taint("n1", key="karpenter.sh/disrupted") is False
    assert cluster.remove_taint("ghost", key="x") is False
    assert kube_api.store.get("nodes", None, "n1")["spec"]["taints"] == [{"key": "keep", "effect": "NoSchedule"}]


def test_taint_update_survives_a_concurrent_writer(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    kube_api.store.create("nodes", node("n1"))
    kube_api.inject_error("/api/v1/nodes/n1", 409, 1, method="PATCH")
    assert cluster.add_taint("n1", Taint("t", "NoExecute")) is True
    assert kube_api.store.get("nodes", None, "n1")["spec"]["taints"] == [{"key": "t", "effect": "NoExecute"}]


def test_node_labels_and_annotations(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    kube_api.store.create("nodes", node("n1", labels={"old": "1"}))
    cluster.label_node("n1", {"new": "2", "old": None})
    cluster.annotate_node("n1", {"karpenter.sh/disruption": "drifted"})
    cluster.annotate_node("n1", {"karpenter.sh/disruption": None, "note": "x"})
    meta = kube_api.store.get("nodes", None, "n1")["metadata"]
    assert "old" not in meta["labels"] and meta["labels"]["new"] == "2"
    assert meta["annotations"] == {"note": "x"}
    with pytest.raises(NotFoundError):
        cluster.label_node("ghost", {"a": "b"})


def test_delete_node_and_pod_report_whether_anything_was_deleted(kube_api: KubeApiServer,
                                                                 cluster: KubeCluster) -> None:
    kube_api.store.create("nodes", node("n1"))
    kube_api.store.create("pods", pod("p", node="n1"))
    assert cluster.delete_node("n1") is True
    assert cluster.delete_node("n1") is False
    assert cluster.delete_pod("default", "p", grace_seconds=0) is True
    assert cluster.delete_pod("default", "p") is False


def test_delete_node_releases_only_the_named_finalizers(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    # Given Nodes held by Karpenter's finalizer, one also by another controller's
    for name, held in (("k1", ["karpenter.sh/termination"]), ("k2", ["karpenter.sh/termination", "x.io/keep"])):
        body = node(name)
        body["metadata"]["finalizers"] = held
        kube_api.store.create("nodes", body)
    # When deleted without releasing anything, the delete is only pending (as on the API server)
    assert cluster.delete_node("k1") is True
    assert kube_api.store.get("nodes", None, "k1")["metadata"]["deletionTimestamp"]
    # When deleted releasing Karpenter's finalizer: k1 is gone; k2 waits for the other controller
    assert cluster.delete_node("k1", release_finalizers=["karpenter.sh/termination"]) is True
    assert cluster.delete_node("k2", release_finalizers=["karpenter.sh/termination"]) is True
    assert not kube_api.store.exists("nodes", None, "k1")
    assert kube_api.store.get("nodes", None, "k2")["metadata"]["finalizers"] == ["x.io/keep"]


def test_eviction_blocked_by_pdb_then_allowed_once_a_pod_is_ready(kube_api: KubeApiServer,
                                                                  cluster: KubeCluster, clock: ManualClock) -> None:
    st = kube_api.store
    st.create("poddisruptionbudgets", pdb("web", match={"app": "web"}, min_available=2))
    st.create("pods", pod("web-1", node="n1", labels={"app": "web"}, ready=True))
    st.create("pods", pod("web-2", node="n2", labels={"app": "web"}, ready=True))
    st.create("pods", pod("web-3", node="n3", labels={"app": "web"}, ready=False, phase="Running"))

    blocked = cluster.evict("default", "web-1", deadline=clock.monotonic() + 10)
    assert blocked.outcome == "blocked" and not blocked.ok
    assert "needs 2 healthy pods and has 2 currently" in blocked.message
    assert blocked.attempts == 4  # at 0, 1, 3 and 7 s; the next backoff (4 s) passes the deadline
    assert st.exists("pods", "default", "web-1")

    st.set_pod_ready("default", "web-3")
    allowed = cluster.evict("default", "web-1", deadline=clock.monotonic())
    assert allowed.outcome == "evicted" and allowed.ok
    assert not st.exists("pods", "default", "web-1")
    assert cluster.evict("default", "web-1", deadline=clock.monotonic()).outcome == "gone"


def test_eviction_retries_through_a_transient_429(kube_api: KubeApiServer, cluster: KubeCluster,
                                                  clock: ManualClock) -> None:
    kube_api.store.create("pods", pod("p", node="n1", ready=True))
    kube_api.inject_error("/pods/p/eviction", 429, 2)
    result = cluster.evict("default", "p", deadline=clock.monotonic() + 60)
    assert (result.outcome, result.attempts) == ("evicted", 3)


def test_eviction_errors_are_reported_not_raised(kube_api: KubeApiServer, cluster: KubeCluster,
                                                 clock: ManualClock) -> None:
    kube_api.store.create("pods", pod("p", node="n1", ready=True))
    kube_api.inject_error("/pods/p/eviction", 403, 1)
    result = cluster.evict("default", "p", deadline=clock.monotonic() + 60)
    assert result.outcome == "error" and "403" in result.message


def test_eviction_with_stale_uid_means_gone(kube_api: KubeApiServer, cluster: KubeCluster,
                                            clock: ManualClock) -> None:
    kube_api.store.create("pods", pod("p", node="n1", ready=True))
    assert cluster.evict("default", "p", deadline=clock.monotonic(), uid="someone-else").outcome == "gone"
    assert kube_api.store.exists("pods", "default", "p")


def test_events_are_recorded_on_pods_and_nodes(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    kube_api.store.create("nodes", node("n1"))
    kube_api.store.create("pods", pod("p", namespace="team"))
    the_pod, the_node = cluster.get_pod("team", "p"), cluster.get_node("n1")
    assert the_pod is not None and the_node is not None
    assert cluster.record_event(the_pod, reason="FailedScheduling", message="no offering fits",
                                event_type="Warning") is True
    assert cluster.record_event(the_node, reason="Launched", message="m5.large in us-east-1a") is True
    events = {e["involvedObject"]["kind"]: e for e in kube_api.store.objects("events")}
    assert events["Pod"]["metadata"]["namespace"] == "team"
    assert events["Pod"]["involvedObject"]["uid"] == the_pod.uid
    assert (events["Pod"]["reason"], events["Pod"]["type"]) == ("FailedScheduling", "Warning")
    assert events["Node"]["metadata"]["namespace"] == "default"
    assert events["Node"]["involvedObject"]["name"] == "n1"
    kube_api.inject_error("/events", 403, 5)
    assert cluster.record_event(the_node, reason="X", message="refused") is False


def test_watch_delivers_a_newly_pending_pod(kube_api: KubeApiServer) -> None:
    cluster = KubeCluster(client_for(kube_api.url))  # real clock: the watch waits on the server
    kube_api.store.create("pods", pod("old-pending"))
    kube_api.store.create("pods", pod("bound", node="n1"))

    def create_later() -> None:
        time.sleep(0.3)
        kube_api.store.create("pods", pod("bound-too", node="n1"))
        kube_api.store.create("pods", pod("fresh"))

    threading.Thread(target=create_later, daemon=True).start()
    seen = []
    for p in cluster.watch_pending_pods(timeout_seconds=10):
        seen.append(p.key)
        break
    assert seen == ["default/fresh"]


def test_watch_ends_at_its_timeout(kube_api: KubeApiServer) -> None:
    cluster = KubeCluster(client_for(kube_api.url))
    assert list(cluster.watch_pending_pods(timeout_seconds=1)) == []
