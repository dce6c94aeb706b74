"""StatefulSets and their volumes in the simulated cluster (sim/controllers.py, sim/volumes.py): ordered pods,
a claim per ordinal, the volume created in the zone of the pod's first node, and attach/detach delays."""

from __future__ import annotations

from typing import Any

from simulator.kube_store import Store
from simulator.sim.controllers import Controllers, StatefulSet
from simulator.sim.engine import EventLoop, VirtualClock
from simulator.sim.volumes import Volumes, VolumeSettings

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
        for name, zone in (("n-a", "us-east-1a"), ("n-b", "us-east-1b")):
            self.store.create("nodes", {"metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}})

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
