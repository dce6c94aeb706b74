"""One provisioner pass (``app/provisioner.Provisioner.run_pass``) on the in-memory port fakes, in virtual time:
pending pods become one node claim and one launch, the pods are nominated, an in-flight instance is capacity for
the next pass, a launch whose answer was lost is resolved without a second launch, a capacity error falls back
to another type, and a dry run launches nothing. The same passes run end to end against moto and the emulator
in ``tests/e2e/``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from autoscaler.adapters.clock import ManualClock
from autoscaler.app.claims import MemoryClaimStore
from autoscaler.app.ports import UncertainOutcomeError
from autoscaler.app.provisioner import Provisioner, ProvisionerSettings
from autoscaler.domain.nodepool import parse_node_pools
from simulator.kube_store import Store
from tests import kube_objects as ko
from tests.adapters.aws.helpers import node_class
from tests.app.fakes_cloud import FakeCloud
from tests.app.fakes_cluster import FakeCluster

POOLS = parse_node_pools([{
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
    "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                    "name": "default"},
                                   "requirements": [
                                       {"key": "node.kubernetes.io/instance-type", "operator": "In",
                                        "values": ["m5.large", "m5a.large"]},
                                       {"key": "karpenter.sh/capacity-type", "operator": "In",
                                        "values": ["on-demand"]},
                                       {"key": "topology.kubernetes.io/zone", "operator": "In",
                                        "values": ["us-east-1a"]}]}}},
}])


@dataclass
class World:
    clock: ManualClock
    cluster: FakeCluster
    cloud: FakeCloud
    claims: MemoryClaimStore
    provisioner: Provisioner

    def pending(self, *names: str, cpu: str = "500m") -> None:
        for name in names:
            self.cluster.store.create("pods", ko.pod(name, cpu=cpu))


def _world(*, dry_run: bool = False) -> World:
    clock = ManualClock(current=1_800_000_000.0)
    cluster = FakeCluster(Store(clock=clock.now), clock=clock)
    cloud = FakeCloud(cluster_name="prod", clock=clock,
                      only_types=frozenset({"m5.large", "m5a.large", "c5.large", "r5.large", "m5.xlarge"}))
    claims = MemoryClaimStore()
    provisioner = Provisioner(cluster=cluster, cloud=cloud, node_pools=POOLS, node_classes={"default": node_class()},
                              settings=ProvisionerSettings(cluster_name="prod", region="us-east-1", dry_run=dry_run),
                              clock=clock, claims=claims)
    return World(clock=clock, cluster=cluster, cloud=cloud, claims=claims, provisioner=provisioner)


@pytest.fixture
def world() -> World:
    return _world()


def test_pending_pods_become_one_claim_and_one_launch_and_are_nominated(world: World) -> None:
    world.pending("a", "b")
    result = world.provisioner.run_pass()
    assert not result.blocked and len(result.plan.launches) == 1
    [request] = world.cloud.launches
    [instance] = world.cloud.owned_instances()
    assert instance.instance_type in ("m5.large", "m5a.large") and instance.capacity_type == "on-demand"
    [claim] = world.claims.claims()
    assert claim.claim_id == request.claim_id == instance.claim_id
    assert sorted(claim.pods) == ["default/a", "default/b"]
    nominated = {e["involvedObject"]["name"] for e in world.cluster.events(reason="Nominated")}
    assert nominated == {"a", "b"}


def test_an_instance_in_flight_is_the_next_passes_capacity(world: World) -> None:
    world.pending("a", "b")
    world.provisioner.run_pass()
    world.clock.advance(60)
    again = world.provisioner.run_pass()
    assert again.plan.launches == [] and len(world.cloud.owned_instances()) == 1
    assert world.cloud.calls["create_fleet"] == 1


def test_a_launch_whose_answer_was_lost_is_resolved_by_the_next_pass_without_a_second_launch(world: World) -> None:
    world.pending("a")
    world.cloud.next_create_fleet_error = UncertainOutcomeError("create_fleet: ReadTimeoutError",
                                                                code="ReadTimeoutError", operation="create_fleet")
    world.provisioner.run_pass()
    [launched] = world.cloud.owned_instances()  # EC2 acted; the pass did not hear of it
    world.clock.advance(60)
    world.provisioner.run_pass()
    assert [i.instance_id for i in world.cloud.owned_instances()] == [launched.instance_id]
    [claim] = world.claims.claims()
    assert claim.instance_id == launched.instance_id


def test_an_offering_without_capacity_falls_back_to_the_other_type(world: World) -> None:
    world.pending("a")
    world.cloud.insufficient.add(("m5a.large", "us-east-1a", "on-demand"))  # the cheaper of the two
    world.provisioner.run_pass()
    [instance] = world.cloud.owned_instances()
    assert instance.instance_type == "m5.large"
    assert ("m5a.large", "us-east-1a", "on-demand") in world.cloud.unavailable()


def test_a_dry_run_plans_but_launches_and_records_nothing() -> None:
    world = _world(dry_run=True)
    world.pending("a")
    result = world.provisioner.run_pass()
    assert len(result.plan.launches) == 1
    assert world.cloud.launches == [] and world.claims.claims() == [] and world.cloud.owned_instances() == []
