"""StatefulSets and their volumes in the simulated cluster (sim/controllers.py, sim/volumes.py): ordered pods,
a claim per ordinal, the volume created in the zone of the pod's first node, attach/detach delays, and the
attach/detach controller's force-detach after maxWaitForUnmountDuration when a node goes uncleanly."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.kube_store import Store
from simulator.sim.controllers import Controllers, StatefulSet
from simulator.sim.engine import EventLoop, VirtualClock
from simulator.sim.volumes import MAX_WAIT_FOR_UNMOUNT_SECONDS, Volumes, VolumeSettings

MANIFEST: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
    "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "db"}},
                                          "spec": {"containers": [{"name": "db"}]}},
             "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                       "spec": {"resources": {"requests": {"storage": "20Gi"}}}}]}}


class World:
    def __init__(self) -> None:
        self.loop = EventLoop(epoch=1_700_000_000.0)
        self.store = Store(graceful_deletion=True)
        self.store.clock = VirtualClock(self.loop).now
        self.controllers = Controllers(self.loop, self.store)
        self.volumes = Volumes(self.loop, self.store, VolumeSettings(provision_seconds=5, attach_seconds=10,
                                                                     detach_seconds=10))
        self._rv = self.store.resource_version
        self.loop.observer = self._observe
        for name, zone in (("n-a", "us-east-1a"), ("n-b", "us-east-1b"), ("n-a2", "us-east-1a")):
            self.store.create("nodes", {"metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
                                        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})

    def _observe(self) -> None:
        changes = self.store.changes_since(self._rv)
        self._rv = self.store.resource_version
        for event in changes:
            self.controllers.observe(event)
            self.volumes.observe(event)

    def run_until(self, t: float) -> None:
        self._observe()
        self.loop.run_until(t)

    def pods(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.store.view("pods"))


def test_ordered_ready_creates_one_ordinal_at_a_time_with_its_own_claim() -> None:
    w = World()
    w.controllers.apply_stateful_set(StatefulSet.from_manifest(MANIFEST))
    w.run_until(5)
    assert w.pods() == ["db-0"]
    claim = w.store.get("persistentvolumeclaims", "default", "data-db-0")
    assert claim["status"]["phase"] == "Pending"
    pod = w.store.get("pods", "default", "db-0")
    assert pod["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]
    # db-1 only once db-0 is Running and Ready
    w.store.bind("default", "db-0", "n-a")
    w.store.set_pod_ready("default", "db-0")
    w.run_until(10)
    assert w.pods() == ["db-0", "db-1"]


def test_the_volume_follows_the_first_node_and_attaches_to_one_node_at_a_time() -> None:
    w = World()
    w.controllers.apply_stateful_set(StatefulSet.from_manifest({**MANIFEST, "spec": {**MANIFEST["spec"],
                                                                                     "replicas": 1}}))
    w.run_until(1)
    w.store.bind("default", "db-0", "n-a")
    pod = w.store.get("pods", "default", "db-0")
    assert w.volumes.ready_in(pod, "n-a") is None  # not provisioned yet
    w.run_until(10)
    claim = w.store.get("persistentvolumeclaims", "default", "data-db-0")
    volume = w.store.get("persistentvolumes", None, claim["spec"]["volumeName"])
    assert volume["metadata"]["labels"] == {"topology.kubernetes.io/zone": "us-east-1a"}
    assert w.volumes.ready_in(pod, "n-a") == 10  # the attach starts now
    w.run_until(15)
    assert w.volumes.ready_in(pod, "n-a") == 5
    assert w.volumes.ready_in(pod, "n-b") is None  # ReadWriteOnce: still attached to n-a
    # the pod goes: the volume detaches 10 s after it has left the API
    w.store.delete("pods", "default", "db-0", grace_period_seconds=0)
    w.run_until(20)
    assert claim["spec"]["volumeName"] in w.volumes.attached
    w.run_until(30)
    assert claim["spec"]["volumeName"] not in w.volumes.attached


def _attached_db_0(w: World) -> tuple[dict[str, Any], str]:
    """db-0 bound to n-a (us-east-1a), its volume provisioned there and attached; returns the pod and volume."""
    w.controllers.apply_stateful_set(StatefulSet.from_manifest({**MANIFEST, "spec": {**MANIFEST["spec"],
                                                                                     "replicas": 1}}))
    w.run_until(1)
    w.store.bind("default", "db-0", "n-a")
    w.run_until(10)
    pod = w.store.get("pods", "default", "db-0")
    assert w.volumes.ready_in(pod, "n-a") == 10
    w.run_until(20)
    claim = w.store.get("persistentvolumeclaims", "default", "data-db-0")
    return pod, claim["spec"]["volumeName"]


def _gone_uncleanly(w: World, how: str) -> None:
    if how == "instance terminated":  # the cloud node lifecycle controller deleted the Node first
        w.store.delete("nodes", None, "n-a")
    else:  # the kubelet stopped: the node lifecycle controller marks the Node Unknown
        w.store.patch("nodes", None, "n-a", {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})


@pytest.mark.parametrize("how", ["instance terminated", "kubelet stopped"])
def test_a_node_gone_uncleanly_holds_its_volume_until_the_force_detach(how: str) -> None:
    # Given db-0's volume attached to n-a, when n-a goes uncleanly and then db-0 leaves the API
    w = World()
    pod, volume = _attached_db_0(w)
    _gone_uncleanly(w, how)
    w.store.delete("pods", "default", "db-0", grace_period_seconds=0)
    deleted = w.loop.now
    w.run_until(deleted + 30)
    # Then the replacement, bound in the volume's zone, cannot attach it for maxWaitForUnmountDuration (6 min)
    assert w.volumes.ready_in(pod, "n-a2") is None
    w.run_until(deleted + MAX_WAIT_FOR_UNMOUNT_SECONDS - 1)
    assert w.volumes.ready_in(pod, "n-a2") is None and w.volumes.attached[volume][0] == "n-a"
    assert w.volumes.force_detaches == 0
    # And then it is force-detached, and attaches to the new node after the usual attach delay
    w.run_until(deleted + MAX_WAIT_FOR_UNMOUNT_SECONDS + 1)
    assert (w.volumes.force_detaches, w.volumes.detaches) == (1, 1)
    assert w.volumes.ready_in(pod, "n-a2") == 10


def test_a_clean_pod_deletion_detaches_after_the_ordinary_delay() -> None:
    # Given db-0's volume attached to a Ready n-a, when db-0 is deleted (its kubelet unmounts)
    w = World()
    _, volume = _attached_db_0(w)
    w.store.delete("pods", "default", "db-0", grace_period_seconds=0)
    # Then the volume detaches 10 s later, no force-detach
    w.run_until(31)
    assert volume not in w.volumes.attached
    assert (w.volumes.force_detaches, w.volumes.detaches) == (0, 1)


def test_the_out_of_service_taint_force_detaches_at_once() -> None:
    # Given n-a NotReady but tainted node.kubernetes.io/out-of-service (non-graceful node shutdown, by an operator)
    w = World()
    pod, volume = _attached_db_0(w)
    w.store.patch("nodes", None, "n-a", {"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service",
                                                              "value": "nodeshutdown", "effect": "NoExecute"}]},
                                         "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    w.store.delete("pods", "default", "db-0", grace_period_seconds=0)
    # Then the volume is released after the ordinary detach delay, not six minutes
    w.run_until(31)
    assert volume not in w.volumes.attached
    assert w.volumes.ready_in(pod, "n-a2") == 10
