"""One disruption pass (``app/disruption.DisruptionService.run_pass``) on the in-memory port fakes, in virtual
time: an empty node goes only after ``consolidateAfter``, a node we did not launch is never touched, a
``do-not-disrupt`` pod keeps its node, and a dry run changes nothing. The handler's wiring and the longer
stories (drains under PDBs, expiry, consolidation with replacements) run against moto and the emulator in
``tests/handlers/disruption/``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from autoscaler.adapters.clock import ManualClock
from autoscaler.app.disruption import DisruptionService
from autoscaler.app.disruption_actions import Options, PassReport
from autoscaler.domain.keys import EMPTY_SINCE_ANNOTATION
from autoscaler.domain.nodepool import parse_node_pools
from autoscaler.domain.ownership import launch_tags
from autoscaler.metrics_catalog import RecordingSink
from simulator.kube_store import Store
from tests import kube_objects as ko
from tests.adapters.aws.helpers import node_class
from tests.app.fakes_cloud import FakeCloud
from tests.app.fakes_cluster import FakeCluster

ZONE = "us-east-1a"
NODE_POOL = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
    "spec": {"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "expireAfter": "720h",
        "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"]}]}},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s",
                       "budgets": [{"nodes": "100%"}]}},
}


@dataclass
class World:
    clock: ManualClock
    cluster: FakeCluster
    cloud: FakeCloud
    sink: RecordingSink
    service: DisruptionService

    def node(self, name: str, *, owned: bool = True) -> str:
        tags = launch_tags(cluster_name="prod", node_pool="default", node_class="default",
                           claim_id=f"default-{name}") if owned else {"Name": "someone-else"}
        instance = self.cloud.run_instance("m5.large", ZONE, tags=tags)
        raw = ko.node(name, labels={"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large",
                                    "topology.kubernetes.io/zone": ZONE, "karpenter.sh/capacity-type": "on-demand",
                                    "karpenter.sh/initialized": "true", "karpenter.sh/registered": "true"},
                      cpu="2", memory="8Gi")
        raw["spec"]["providerID"] = f"aws:///{ZONE}/{instance.instance_id}"
        self.cluster.store.create("nodes", raw)
        return instance.instance_id

    def run(self) -> PassReport:
        return self.service.run_pass(deadline=self.clock.monotonic() + 60)


def _world(*, dry_run: bool = False) -> World:
    clock = ManualClock(current=1_800_000_000.0)
    cluster = FakeCluster(Store(clock=clock.now), clock=clock)
    cloud = FakeCloud(cluster_name="prod", clock=clock, only_types=frozenset({"m5.large", "m5.xlarge", "c5.large"}))
    sink = RecordingSink()
    service = DisruptionService(cluster=cluster, cloud=cloud, node_pools=parse_node_pools([NODE_POOL]),
                                node_classes={"default": node_class()}, cluster_name="prod", region="us-east-1",
                                clock=clock, sink=sink, options=Options(dry_run=dry_run))
    return World(clock=clock, cluster=cluster, cloud=cloud, sink=sink, service=service)


@pytest.fixture
def world() -> World:
    return _world()


def test_an_empty_node_is_removed_only_after_consolidate_after(world: World) -> None:
    iid = world.node("n1")
    world.cluster.store.create("pods", ko.pod("agent", node="n1", owner_kind="DaemonSet"))
    world.run()
    n1 = world.cluster.store.peek("nodes", None, "n1")
    assert n1 is not None and EMPTY_SINCE_ANNOTATION in n1["metadata"]["annotations"]
    world.clock.advance(20)
    assert world.run().removed == [] and world.cluster.store.exists("nodes", None, "n1")
    world.clock.advance(15)
    assert world.run().removed == ["n1"]
    assert not world.cluster.store.exists("nodes", None, "n1") and world.cloud.instances[iid].state == "shutting-down"
    assert world.sink.total("NodesDisrupted", Reason="Empty") == 1


def test_a_node_we_did_not_launch_is_never_touched(world: World) -> None:
    iid = world.node("theirs", owned=False)
    world.run()
    world.clock.advance(3600)
    assert world.run().removed == []
    assert world.cluster.store.exists("nodes", None, "theirs") and world.cloud.instances[iid].state == "running"


def test_a_do_not_disrupt_pod_keeps_its_node(world: World) -> None:
    world.node("keep")
    world.cluster.store.create("pods", ko.pod("precious", node="keep", ready=True,
                                              annotations={"karpenter.sh/do-not-disrupt": "true"}))
    world.clock.advance(3600)
    report = world.run()
    assert report.removed == [] and world.cluster.store.exists("nodes", None, "keep")
    assert {(b.node, b.guard) for b in report.blocked} == {("keep", "DoNotDisrupt")}


def test_a_dry_run_reports_and_changes_nothing() -> None:
    world = _world(dry_run=True)
    iid = world.node("n1")
    world.run()
    world.clock.advance(3600)
    report = world.run()
    assert report.dry_run and [c.nodes for c in report.decided] == [("n1",)]
    assert world.cluster.store.exists("nodes", None, "n1") and world.cloud.instances[iid].state == "running"
    assert world.cluster.events() == [] and world.sink.total("NodesDisrupted") == 0
