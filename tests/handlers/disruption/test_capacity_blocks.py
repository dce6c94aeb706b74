"""A Capacity Block's end in the disruption function: 40 minutes before its EndDate (Karpenter's
expiration controller) the nodes running in it are replaced first, then drained, like an interruption:
disruption budgets and do-not-disrupt do not hold it (EC2 reclaims the instances at the end). moto
(in-process) with the capacity-reservation stub for EC2, the emulator for Kubernetes."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.keys import CAPACITY_RESERVATION_ID_LABEL
from simulator.ec2_reservations import CapacityReservationStub
from tests.handlers.disruption.conftest import node_pool

HOUR = 3600.0


@pytest.fixture
def world(make_world: Any) -> Any:
    w = make_world(pools=[node_pool(policy="WhenEmpty", budgets=[{"nodes": "0"}])])
    w.reservations = CapacityReservationStub()
    w.reservations.install(w.ec2.meta.events, lambda: w.ec2)
    return w


def node_in(w: Any, rid: str, *, pod_annotations: dict[str, str] | None = None) -> tuple[str, str]:
    iid = w.launch()
    name = w.register(iid, labels={CAPACITY_RESERVATION_ID_LABEL: rid, "karpenter.sh/capacity-type": "reserved"})
    w.pod("train-0", name, annotations=pod_annotations)
    return name, iid


@pytest.mark.parametrize("pod_annotations", [None, {"karpenter.sh/do-not-disrupt": "true"}])
def test_a_capacity_blocks_nodes_are_replaced_then_drained_before_its_end(world: Any,
                                                                           pod_annotations: Any) -> None:
    w = world
    # GIVEN a busy node in a Capacity Block ending in two hours, under a budget of zero nodes
    rid = w.reservations.add("m5.large", "us-east-1a", 1, capacity_block=True, end_date=w.clock.now() + 2 * HOUR)
    name, iid = node_in(w, rid, pod_annotations=pod_annotations)
    # WHEN a pass runs well before the end THEN nothing happens
    assert w.run()["decisions"] == []
    # WHEN the block is 39 minutes from its end
    w.clock.advance(2 * HOUR - 39 * 60)
    before = {i["InstanceId"] for i in w.live_instances()}
    report = w.run()
    # THEN the node is replaced first (budgets and do-not-disrupt do not hold it), keeping its pod meanwhile
    [decision] = report["decisions"]
    assert (decision["reason"], decision["action"]) == ("CapacityBlockExpiring", "replace")
    assert report["replacing"] == [name] and w.pods_on(name) == ["train-0"]
    [new_iid] = {i["InstanceId"] for i in w.live_instances()} - before
    assert any(f"Capacity Block {rid} ends at" in m for m in w.event_messages(name))
    # WHEN the replacement registers THEN the node is drained and its instance terminated
    w.register(new_iid)
    report = w.run()
    assert report["removed"] == [name] and w.state(iid) in ("shutting-down", "terminated")


def test_an_on_demand_capacity_reservation_with_an_end_date_drains_nothing(world: Any) -> None:
    # GIVEN a node in an ODCR (not a Capacity Block) that ends in 10 minutes
    w = world
    rid = w.reservations.add("m5.large", "us-east-1a", 1, end_date=w.clock.now() + 600)
    node_in(w, rid)
    # WHEN a pass runs THEN nothing is disrupted: EC2 keeps the instance running on-demand after the end
    assert w.run()["decisions"] == []
