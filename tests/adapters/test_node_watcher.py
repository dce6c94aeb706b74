"""The watcher's node stream (app/pod_watcher.py with adapters/kube/node_watch.py) against the Kubernetes
API emulator: a node of ours registering or becoming Ready wakes the provisioner once per (node, reason);
heartbeats, foreign nodes and old nodes on a fresh list do not; 410 on the node stream relists it; the
wake-up carries only a pod resourceVersion. Runs end on conditions (see test_pod_watcher.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.adapters.kube.node_watch import KubeNodeWatch
from autoscaler.app.pod_watcher import PendingPodWatcher, WatcherSettings
from autoscaler.domain.keys import INITIALIZED_LABEL, NODEPOOL_LABEL, UNREGISTERED_TAINT_KEY
from simulator.kube_api import KubeApiServer, client_for
from tests.adapters.test_pod_watcher import RecordingWaker, applied, finish_when, unschedulable, when
from tests.kube_objects import node

UNREGISTERED = {"key": UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}
NOT_READY = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]


def registering(name: str, *, labels: dict[str, str] | None = None, ready: bool = False) -> dict[str, Any]:
    """A node as the kubelet registers it from our user data: our NodePool label, the unregistered taint."""
    n = node(name, labels={NODEPOOL_LABEL: "default"} if labels is None else labels, taints=[UNREGISTERED])
    if not ready:
        n["status"]["conditions"] = NOT_READY
    return n


def watcher_for(kube_api: KubeApiServer, waker: RecordingWaker, *, idle: float = 0.3) -> PendingPodWatcher:
    cluster = KubeCluster(client_for(kube_api.url), backoff_base=0.05)
    return PendingPodWatcher(pods=cluster, nodes=KubeNodeWatch(cluster), waker=waker, clock=waker.clock,
                             settings=WatcherSettings(batch_idle=idle, batch_max=2.0, backoff_base=0.05))


def set_ready(kube_api: KubeApiServer, name: str, *, heartbeat: str = "") -> str:
    """Mark the node Ready; the resourceVersion written."""
    conditions = [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat or "2026-11-24T00:00:00Z"}]
    return str(kube_api.store.patch("nodes", None, name, {"status": {"conditions": conditions}})
               ["metadata"]["resourceVersion"])


class ReasonWaker(RecordingWaker):
    reasons: list[str]

    def wake(self, *, reason: str, pods: int, resource_version: str = "") -> None:
        super().wake(reason=reason, pods=pods, resource_version=resource_version)
        self.__dict__.setdefault("reasons", []).append(reason)


def test_a_node_of_ours_registering_wakes_once_and_ready_once(kube_api: KubeApiServer) -> None:
    # Given a watcher of nodes and pods on a cluster without nodes
    waker = ReasonWaker()
    watcher = watcher_for(kube_api, waker)
    # When a node of ours registers, becomes Ready once woken for, then sends status heartbeats
    def heartbeats() -> None:
        set_ready(kube_api, "n1", heartbeat="2026-11-24T00:00:10Z")
        last = set_ready(kube_api, "n1", heartbeat="2026-11-24T00:00:20Z")
        finish_when(kube_api, waker.clock, applied(lambda: watcher.node_resource_version, last), what="heartbeats")
    when(lambda: watcher.node_resource_version, lambda: kube_api.store.create("nodes", registering("n1")),
         what="the first node list")
    when(lambda: len(waker.wakes) >= 1, lambda: set_ready(kube_api, "n1"), what="the registration's wake-up")
    when(lambda: len(waker.wakes) >= 2, heartbeats, what="the Ready wake-up")
    run = watcher.run(until=waker.clock.deadline())
    # Then one wake-up for the registration and one for Ready; the heartbeats woke nothing more
    assert waker.reasons == ["1 node(s) registered", "1 node(s) ready"]
    assert run.wakes == 2 and run.woken_nodes == 2 and run.woken_pods == 0
    # And no pod was ever seen: they carry no version (neither the node's nor the pod list's: the pass lists)
    assert waker.versions == ["", ""]


def test_a_node_without_our_label_never_wakes(kube_api: KubeApiServer) -> None:
    # Given a watcher
    waker = ReasonWaker()
    watcher = watcher_for(kube_api, waker)
    # When a node of a managed node group (no NodePool label) registers tainted and becomes Ready, and an
    # initialised node of ours is updated; then a node of ours registers (the stream is ordered: once the
    # watcher has applied it, it has seen whatever of the others the server sent)
    def foreign() -> None:
        kube_api.store.create("nodes", registering("mng-1", labels={"eks.amazonaws.com/nodegroup": "ng"}))
        set_ready(kube_api, "mng-1")
        kube_api.store.create("nodes", node("done", labels={NODEPOOL_LABEL: "default", INITIALIZED_LABEL: "true"}))
        ours = str(kube_api.store.create("nodes", registering("ours"))["metadata"]["resourceVersion"])
        finish_when(kube_api, waker.clock, applied(lambda: watcher.node_resource_version, ours), what="our node")
    when(lambda: watcher.node_resource_version, foreign, what="the first node list")
    run = watcher.run(until=waker.clock.deadline())
    # Then only our node woke the provisioner, and the watcher remembers none of the others
    assert waker.reasons == ["1 node(s) registered"] and run.wakes == 1
    assert set(watcher.woken_nodes) == {"ours"}


def test_a_node_leaving_the_selection_is_forgotten(kube_api: KubeApiServer) -> None:
    # Given a node of ours the watcher woke for
    waker = ReasonWaker()
    watcher = watcher_for(kube_api, waker)
    waker.end_when = lambda w: bool(w.wakes)
    when(lambda: watcher.node_resource_version, lambda: kube_api.store.create("nodes", registering("n1", ready=True)),
         what="the first node list")
    watcher.run(until=waker.clock.deadline())
    assert waker.reasons == ["1 node(s) registered, 1 node(s) ready"]
    assert set(watcher.woken_nodes) == {"n1"}
    # When the provisioner initialises it
    waker.end_when = None
    kube_api.store.patch("nodes", None, "n1", {"metadata": {"labels": {INITIALIZED_LABEL: "true"}}})
    finish_when(kube_api, waker.clock, lambda: watcher.woken_nodes == {}, what="the node leaving the selection")
    watcher.run(until=waker.clock.deadline())
    # Then the watcher forgets it (memory: only nodes waiting for initialisation) and wakes no more
    assert watcher.woken_nodes == {}
    assert len(waker.wakes) == 1


@pytest.mark.parametrize(("case", "created_ago", "wakes"), [
    ("created an hour before the list: a previous run woke for it", 3600, 0),
    ("created just now", 5, 1),
])
def test_a_fresh_list_wakes_only_for_recently_created_nodes(kube_api: KubeApiServer, case: str,
                                                             created_ago: float, wakes: int) -> None:
    # Given a node of ours, stuck uninitialised (a startup taint never removed), found by a cold list
    n = registering("n1", ready=True)
    n["metadata"]["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - created_ago))
    kube_api.store.create("nodes", n)
    waker = ReasonWaker()
    watcher = watcher_for(kube_api, waker)
    # When a cold watcher runs (until it has applied the list: a batch still open is woken for as it ends)
    finish_when(kube_api, waker.clock, lambda: watcher.woken_nodes, what="the node list")
    watcher.run(until=waker.clock.deadline())
    # Then it wakes only for a node created recently, and remembers it either way
    assert len(waker.wakes) == wakes, case
    assert set(watcher.woken_nodes) == {"n1"}


def test_410_on_the_node_stream_relists_it(kube_api: KubeApiServer) -> None:
    # Given a warm watcher whose node resourceVersion is older than the API server keeps
    waker = ReasonWaker()
    watcher = watcher_for(kube_api, waker)
    finish_when(kube_api, waker.clock, lambda: watcher.resource_version and watcher.node_resource_version,
                what="the first lists")
    watcher.run(until=waker.clock.deadline())
    before = (watcher.resource_version, watcher.node_resource_version)
    kube_api.store.create("nodes", registering("registered-in-the-gap"))
    kube_api.store.compact()
    # When it runs again (until both streams applied a new list and the provisioner was woken)
    finish_when(kube_api, waker.clock, lambda: waker.wakes and watcher.resource_version != before[0]
                and watcher.node_resource_version != before[1], what="both lists and the wake-up")
    run = watcher.run(until=waker.clock.deadline())
    # Then both streams list again (410 Gone) and the node of the gap wakes the provisioner
    assert run.lists == 2
    assert waker.reasons == ["1 node(s) registered"]


def test_nodes_and_pods_share_a_batch_and_the_pod_version(kube_api: KubeApiServer) -> None:
    # Given a watcher
    waker = ReasonWaker(end_when=lambda w: bool(w.wakes))
    watcher = watcher_for(kube_api, waker, idle=2.0)  # the two streams deliver apart: a generous window
    written: list[str] = []
    # When a pod goes unschedulable and, within the window, a node of ours registers (a newer version)
    def both() -> None:
        written.append(kube_api.store.create("pods", unschedulable("p"))["metadata"]["resourceVersion"])
        kube_api.store.create("nodes", registering("n1"))
    when(lambda: watcher.resource_version and watcher.node_resource_version, both, what="the first lists")
    watcher.run(until=waker.clock.deadline())
    # Then one wake-up carries both reasons and the pod's version, not the node's
    assert waker.reasons == ["1 node(s) registered, 1 pod(s) became unschedulable"]
    assert waker.versions == written
    # And a later node-only wake-up carries the newest pod version the watcher applied, not the node's
    waker.end_when = lambda w: len(w.wakes) >= 2
    set_ready(kube_api, "n1")
    watcher.run(until=waker.clock.deadline())
    assert waker.reasons[-1] == "1 node(s) ready"
    assert waker.versions[-1] == written[-1]


def test_without_the_node_rule_pods_still_wake_and_only_the_pod_stream_counts_as_connected(
        kube_api: KubeApiServer) -> None:
    # Given an API server refusing the node list (the watcher's RBAC not re-applied after the upgrade)
    kube_api.inject_error("/api/v1/nodes", 403, 3, method="GET")
    waker = ReasonWaker()
    watcher = watcher_for(kube_api, waker)
    # When a pod goes unschedulable (the run lasting until it was woken for and the node list got through)
    when(lambda: watcher.resource_version, lambda: kube_api.store.create("pods", unschedulable("p")),
         what="the first pod list")
    finish_when(kube_api, waker.clock, lambda: waker.wakes and watcher.node_resource_version,
                what="the wake-up and the node list")
    run = watcher.run(until=waker.clock.deadline())
    # Then the pod still woke the provisioner; the node stream's refusals are counted as errors
    assert waker.reasons == ["1 pod(s) became unschedulable"]
    assert run.connected and run.errors == 3
    # And when instead only the pod stream is refused, the run is not connected (the Errors alarm's signal)
    kube_api.inject_error("/api/v1/pods", 403, 100, method="GET")
    cold = watcher_for(kube_api, ReasonWaker())
    assert not cold.run(until=cold.clock.monotonic() + 0.5).connected
