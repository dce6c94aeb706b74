"""The simulation's world without AWS: the virtual-time event loop, the workload controllers and the
kubelet/node lifecycle, on the API emulator's store (simulator/sim/)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.ec2_instance import ec2_instance
from simulator.kube_store import Store
from simulator.sim.cloud import CloudWorld, InstanceRecord
from simulator.sim.controllers import Controllers, Deployment
from simulator.sim.engine import EventLoop, VirtualClock
from simulator.sim.kubelet import Kubelets, KubeletSettings

POD = {"metadata": {"labels": {"app": "web"}},
       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                "terminationGracePeriodSeconds": 30}}


# ----- the event loop ------------------------------------------------------------------------------
def test_events_run_in_time_order_and_schedules_repeat() -> None:
    loop = EventLoop(epoch=1_000.0)
    seen: list[tuple[float, str]] = []
    loop.at(5, "b", lambda: seen.append((loop.now, "b")))
    loop.at(1, "a", lambda: seen.append((loop.now, "a")))
    loop.every(2, "tick", lambda: seen.append((loop.now, "tick")), start=3)
    loop.run_until(7)
    assert seen == [(1, "a"), (3, "tick"), (5, "b"), (5, "tick"), (7, "tick")]
    assert VirtualClock(loop).now() == 1_007.0
    assert VirtualClock(loop).monotonic() == 7.0


def test_a_sleeping_handler_lets_the_world_and_other_functions_run_but_not_itself() -> None:
    # Given a provisioner invocation that sleeps 10 s, a kubelet event and two Lambda events due meanwhile
    loop = EventLoop(epoch=0.0)
    clock = VirtualClock(loop)
    seen: list[tuple[float, str]] = []

    def provisioner() -> None:
        seen.append((loop.now, "provisioner starts"))
        clock.sleep(10)
        seen.append((loop.now, "provisioner ends"))

    loop.at(0, "provisioner", provisioner, lambda_call=True)
    loop.at(3, "kubelet", lambda: seen.append((loop.now, "kubelet")))
    loop.at(4, "disruption", lambda: seen.append((loop.now, "disruption")), lambda_call=True)
    loop.at(5, "provisioner", lambda: seen.append((loop.now, "provisioner again")), lambda_call=True)
    # When the loop runs
    loop.run_until(20)
    # Then the kubelet and the other function run inside the sleep; the provisioner's next run waits for it
    assert seen == [(0, "provisioner starts"), (3, "kubelet"), (4, "disruption"), (10, "provisioner ends"),
                    (10, "provisioner again")]


# ----- a small world -------------------------------------------------------------------------------
# What the product writes for its nodes (AL2023): the NodePool label and the registration taint.
USER_DATA = """apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  kubelet:
    flags: [--node-labels=karpenter.sh/nodepool=default, --register-with-taints=karpenter.sh/unregistered:NoExecute]
"""


class World:
    def __init__(self) -> None:
        self.loop = EventLoop(epoch=1_700_000_000.0)
        self.store = Store(graceful_deletion=True)
        self.store.clock = VirtualClock(self.loop).now
        self.cloud = CloudWorld(self.loop, "us-east-1")
        self.kubelets = Kubelets(self.loop, self.store, self.cloud, {}, "us-east-1", KubeletSettings(),
                                 user_data=lambda _: USER_DATA)
        self.controllers = Controllers(self.loop, self.store)
        self._rv = self.store.resource_version
        self.loop.observer = self._observe

    def _observe(self) -> None:
        changes = self.store.changes_since(self._rv)
        self._rv = self.store.resource_version
        for event in changes:
            self.kubelets.observe(event)
            self.controllers.observe(event)

    def launch(self, iid: str = "i-1") -> InstanceRecord:
        record = InstanceRecord(iid, self.loop.now, instance=ec2_instance({
            "InstanceId": iid, "InstanceType": "m5.xlarge", "Placement": {"AvailabilityZone": "us-east-1a"},
            "PrivateDnsName": f"ip-{iid}.ec2.internal", "InstanceLifecycle": "spot",
            "Tags": [{"Key": "karpenter.sh/nodepool", "Value": "default"}]}))
        self.cloud.instances[iid] = record
        for callback in self.cloud.on_launch:
            callback(record)
        return record

    def run_until(self, t: float) -> None:
        """What the test wrote directly to the store is seen first, as the runner's informer would."""
        self._observe()
        self.loop.run_until(t)

    def pods(self) -> list[dict[str, Any]]:
        return sorted(self.store.objects("pods"), key=lambda p: p["metadata"]["name"])


def test_a_node_registers_tainted_turns_ready_and_goes_away_with_its_instance() -> None:
    w = World()
    record = w.launch()
    # Registered after the boot delay, with the registration and not-ready taints
    w.run_until(30)
    node = w.store.get("nodes", None, "ip-i-1.ec2.internal")
    assert {t["key"] for t in node["spec"]["taints"]} == {"karpenter.sh/unregistered", "node.kubernetes.io/not-ready"}
    assert node["status"]["conditions"][0] == {"type": "Ready", "status": "False",
                                               "lastTransitionTime": "2023-11-14T22:13:50Z"}  # epoch + 30 s
    assert node["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"
    # Ready 10 s later, without the not-ready taint
    w.run_until(40)
    node = w.store.get("nodes", None, "ip-i-1.ec2.internal")
    assert {t["key"] for t in node["spec"]["taints"]} == {"karpenter.sh/unregistered"}
    assert node["status"]["conditions"][0]["status"] == "True"
    # A pod bound there runs after the start delay
    w.store.create("pods", {"metadata": {"name": "p", "uid": "u-p"}, "spec": {"nodeName": node["metadata"]["name"],
                                                                              "containers": []}})
    w.run_until(45)
    assert w.store.get("pods", "default", "p")["status"]["phase"] == "Running"
    assert w.kubelets.running["u-p"] == pytest.approx(43.0)
    # The instance terminated: NotReady and unreachable 40 s later, deleted after 60 s, its pods collected
    record.terminated_at = w.loop.now
    for callback in w.cloud.on_terminate:
        callback(record)
    w.run_until(100)
    node = w.store.get("nodes", None, "ip-i-1.ec2.internal")
    assert node["status"]["conditions"][0]["status"] == "Unknown"
    assert "node.kubernetes.io/unreachable" in {t["key"] for t in node["spec"]["taints"]}
    w.run_until(107)
    assert not w.store.exists("nodes", None, "ip-i-1.ec2.internal")
    assert w.store.exists("pods", "default", "p")
    w.run_until(115)
    assert not w.store.exists("pods", "default", "p")


def test_a_stopped_kubelet_leaves_its_node_unknown_and_its_pods_terminating() -> None:
    # Given a Ready node running a pod and a pod tolerating the unreachable taint for ever (a DaemonSet's)
    w = World()
    record = w.launch()
    w.run_until(40)
    name = "ip-i-1.ec2.internal"
    for pod, tolerations in (("p", []), ("agent", [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                                     "effect": "NoExecute"}])):
        w.store.create("pods", {"metadata": {"name": pod, "uid": f"u-{pod}"},
                                "spec": {"nodeName": name, "containers": [], "tolerations": tolerations}})
    w.run_until(45)
    # When its kubelet stops reporting at 45 s (the instance keeps running)
    w.kubelets.stop(record)
    # Then 40 s later the node is Ready=Unknown since then, tainted unreachable
    w.run_until(86)
    node = w.store.get("nodes", None, name)
    ready = node["status"]["conditions"][0]
    assert ready["status"] == "Unknown" and ready["lastTransitionTime"] == "2023-11-14T22:14:45Z"  # epoch + 85 s
    assert "node.kubernetes.io/unreachable" in {t["key"] for t in node["spec"]["taints"]}
    assert w.store.get("pods", "default", "p")["metadata"].get("deletionTimestamp") is None
    # And 300 s after the taint, the taint manager deletes the pod without a toleration of its own; with no
    # kubelet to confirm, it stays Terminating; the tolerating pod stays as it was
    w.run_until(400)
    assert w.store.get("pods", "default", "p")["metadata"]["deletionTimestamp"]
    assert w.store.get("pods", "default", "agent")["metadata"].get("deletionTimestamp") is None
    # And a pod bound there now never starts
    w.store.create("pods", {"metadata": {"name": "late", "uid": "u-late"},
                            "spec": {"nodeName": name, "containers": []}})
    w.run_until(420)
    assert w.store.get("pods", "default", "late")["status"]["phase"] == "Pending"
    assert record.alive and w.kubelets.stopped == {"i-1": 45.0}


def test_deployment_replaces_evicted_pods_and_scales_down_pending_first() -> None:
    w = World()
    w.controllers.apply_deployment(Deployment("web", "default", 3, POD))
    w.run_until(1)
    pods = w.pods()
    assert len(pods) == 3
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in pods)
    # Given two pods running on a node and one pending
    w.store.create("nodes", {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}})
    for p in pods[:2]:
        w.store.bind("default", p["metadata"]["name"], "n1")
    w.run_until(10)
    # When one running pod is evicted (graceful deletion: it keeps a deletionTimestamp for a while)
    w.store.evict("default", pods[0]["metadata"]["name"])
    w.run_until(11)
    # Then a replacement exists at once, and the evicted pod goes after its (capped) grace period
    live = [p for p in w.pods() if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 3
    w.run_until(13)
    assert not w.store.exists("pods", "default", pods[0]["metadata"]["name"])
    # When scaled to 1, the pending pods go first and the running one stays
    w.controllers.scale("default", "web", 1)
    w.run_until(20)
    assert [p["metadata"]["name"] for p in w.pods()] == [pods[1]["metadata"]["name"]]


def test_daemonset_runs_one_pod_per_accepting_node() -> None:
    w = World()
    w.store.create("daemonsets", {"metadata": {"name": "agent", "namespace": "kube-system"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {"metadata": {"labels": {"app": "agent"}},
                     "spec": {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": []}}}})
    w.store.create("nodes", {"metadata": {"name": "a", "labels": {"kubernetes.io/os": "linux"}}})
    w.store.create("nodes", {"metadata": {"name": "b", "labels": {"kubernetes.io/os": "windows"}}})
    w.store.create("nodes", {"metadata": {"name": "c", "labels": {"kubernetes.io/os": "linux"}},
                             "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}})
    # not-ready is tolerated by every DaemonSet pod
    w.store.create("nodes", {"metadata": {"name": "d", "labels": {"kubernetes.io/os": "linux"}},
                             "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}})
    w.run_until(1)
    pinned = sorted(p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                    ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0] for p in w.pods())
    assert pinned == ["a", "d"]
    # A node that goes away loses its pod
    w.store.delete("nodes", None, "a")
    w.run_until(10)
    assert len([p for p in w.pods() if not p["metadata"].get("deletionTimestamp")]) == 1
