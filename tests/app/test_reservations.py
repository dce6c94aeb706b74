"""Reserved capacity in the domain: the EC2 reservation record, which reservations a launch may use and
in what order, a Capacity Block's expiring window, reserved-first planning and the launcher's
capacity-type preference. Pure: no AWS."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from autoscaler.app.launcher import fleet_request_for
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, ZONE_LABEL
from autoscaler.domain.nodeclass import parse_node_class
from autoscaler.domain.plan import Launch
from autoscaler.domain.reservations import (
    CAPACITY_BLOCK_EXPIRATION_LEAD,
    CapacityReservation,
    launch_order,
    reservation_from_ec2,
)
from autoscaler.domain.scheduling import plan, plan_reserved_first
from tests.domain.scheduling_world import check_plan, pod, pool, world

NOW = 1_800_000_000.0


def _reserved_pool(values: list[str], name: str = "default") -> Any:
    return pool(name, requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": values}])


def _cr(rid: str, itype: str = "m5.xlarge", zone: str = "us-east-1a", available: int = 2, **kw: Any) -> Any:
    return CapacityReservation(rid, itype, zone, available, **kw)


def test_reservation_from_ec2_reads_boto3_and_cli_shapes() -> None:
    raw = {"CapacityReservationId": "cr-1", "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1a",
           "AvailableInstanceCount": 3, "OwnerId": "123456789012", "ReservationType": "capacity-block",
           "InstanceMatchCriteria": "targeted", "EndDate": datetime.fromtimestamp(NOW, UTC)}
    r = reservation_from_ec2(raw)
    assert (r.available, r.reservation_type, r.end_time, r.match_criteria) == (3, "capacity-block", NOW, "targeted")
    assert reservation_from_ec2({**raw, "EndDate": "2027-01-15T08:00:00Z"}).end_time == datetime(
        2027, 1, 15, 8, tzinfo=UTC).timestamp()
    with pytest.raises(ValueError, match="InstanceType is required"):
        reservation_from_ec2({"CapacityReservationId": "cr-1"})
    with pytest.raises(ValueError, match="ReservationType 'interruptible'"):
        reservation_from_ec2({**raw, "ReservationType": "interruptible"})


@pytest.mark.parametrize(("kind", "end", "expiring", "usable"), [
    ("capacity-block", NOW + CAPACITY_BLOCK_EXPIRATION_LEAD + 1, False, True),
    ("capacity-block", NOW + CAPACITY_BLOCK_EXPIRATION_LEAD, True, False),  # 40 min before: Karpenter's window
    ("capacity-block", NOW - 1, True, False),
    ("default", NOW + 60, False, True),  # an ODCR's end never drains
    ("default", NOW - 1, False, False),
    ("default", None, False, True),
])
def test_capacity_block_expiring_window(kind: str, end: float | None, expiring: bool, usable: bool) -> None:
    r = _cr("cr-1", reservation_type=kind, end_time=end)
    assert (r.expiring(NOW), r.usable(NOW)) == (expiring, usable)


def test_launch_order_follows_the_launch_types_then_room() -> None:
    # Given reservations of several types, zones and rooms
    rs = [_cr("cr-a", "m5.2xlarge", available=5), _cr("cr-b", "m5.xlarge", available=1),
          _cr("cr-c", "m5.xlarge", available=3), _cr("cr-d", "m5.xlarge", zone="us-east-1c", available=9),
          _cr("cr-e", "m5.xlarge", available=4, reservation_type="capacity-block", end_time=NOW + 60)]
    remaining = {r.reservation_id: r.available for r in rs}
    # When a launch of m5.xlarge-then-m5.2xlarge in zone a asks
    got = launch_order(rs, instance_types=["m5.xlarge", "m5.2xlarge"], zones={"us-east-1a"}, remaining=remaining,
                       now=NOW)
    # Then its first type's reservations come first, the roomiest first; other zones and expiring blocks never
    assert [r.reservation_id for r in got] == ["cr-c", "cr-b", "cr-a"]
    assert [r.reservation_id for r in launch_order(rs, instance_types=["m5.xlarge"], zones={"us-east-1a"},
                                                    remaining={**remaining, "cr-c": 0}, now=NOW)] == ["cr-b"]


def test_reserved_first_fills_the_reservation_then_plans_the_rest() -> None:
    # Given 3 pods of 3 CPU and a reservation of two m5.xlarge, in a pool allowing reserved and on-demand
    snap = world([pod(f"train-{i}", cpu=3000) for i in range(3)], pools=[_reserved_pool(["reserved", "on-demand"])],
                 reservations={"default": (_cr("cr-1"),)})
    # When planned
    result = plan_reserved_first(snap)
    # Then two nodes are reserved m5.xlarge in the reservation's zone, priced 0, and one more is on-demand
    check_plan(snap, result)
    reserved = [ln for ln in result.launches if ln.capacity_type == "reserved"]
    assert [(ln.instance_types, ln.zones, ln.hourly_price, len(ln.pods)) for ln in reserved] == [
        (("m5.xlarge",), ("us-east-1a",), 0.0, 1)] * 2
    assert all(ln.labels[CAPACITY_TYPE_LABEL] == "reserved" and ln.labels[ZONE_LABEL] == "us-east-1a"
               for ln in reserved)
    [other] = [ln for ln in result.launches if ln.capacity_type != "reserved"]
    assert other.capacity_type == "on-demand" and len(other.pods) == 1
    # And without reservations (or a pool not allowing them) it is exactly the ordinary plan
    plain = world([pod(f"train-{i}", cpu=3000) for i in range(3)], pools=[_reserved_pool(["on-demand"])],
                  reservations={"default": (_cr("cr-1"),)})
    assert plan_reserved_first(plain).launches == plan(plain).launches


def test_reservations_of_several_types_are_all_filled() -> None:
    # Given 200 pods of mixed sizes and reservations of two types in two zones (15 slots)
    pods = [pod(f"app{i % 20}-{i}", cpu=250 * (1 + i % 8), app=f"app{i % 20}") for i in range(200)]
    rs = (_cr("cr-x", "m5.xlarge", "us-east-1a", 10), _cr("cr-2x", "m5.2xlarge", "us-east-1b", 5))
    snap = world(pods, pools=[_reserved_pool(["reserved", "on-demand"])], reservations={"default": rs})
    # When planned
    result = plan_reserved_first(snap)
    # Then every slot of both is taken (a round per type), each node in its reservation's zone, pods once
    check_plan(snap, result)
    reserved = [(ln.instance_types, ln.zones) for ln in result.launches if ln.capacity_type == "reserved"]
    assert sorted(reserved) == [(("m5.2xlarge",), ("us-east-1b",))] * 5 + [(("m5.xlarge",), ("us-east-1a",))] * 10


@pytest.mark.parametrize(("selector", "want"), [
    ({"karpenter.sh/capacity-type": "on-demand"}, "on-demand"),  # never on a reserved node
    ({"karpenter.sh/capacity-type": "reserved"}, "reserved"),  # planned into the reservation
    ({}, "reserved"),
])
def test_a_pods_capacity_type_requirement_decides_whether_it_takes_a_slot(selector: dict[str, str],
                                                                          want: str) -> None:
    # Given one 3-CPU pod with (or without) a capacity-type node selector and a reservation with room
    snap = world([pod("train-0", cpu=3000, node_selector=selector)], pools=[_reserved_pool(["reserved", "on-demand"])],
                 reservations={"default": (_cr("cr-1"),)})
    # When planned THEN its node has the capacity type it allows
    result = plan_reserved_first(snap)
    check_plan(snap, result)
    assert [ln.capacity_type for ln in result.launches] == [want]


def test_a_pod_requiring_reserved_beyond_the_reservation_stays_pending() -> None:
    pods = [pod(f"train-{i}", cpu=3000, node_selector={"karpenter.sh/capacity-type": "reserved"}) for i in range(2)]
    snap = world(pods, pools=[_reserved_pool(["reserved", "on-demand"])],
                 reservations={"default": (_cr("cr-1", available=1),)})
    result = plan_reserved_first(snap)
    check_plan(snap, result)
    assert [ln.capacity_type for ln in result.launches] == ["reserved"]
    assert len(result.unschedulable) == 1


def test_small_pods_fill_a_reserved_nodes_spare_room() -> None:
    # Given a 3-CPU pod and a 250m pod that may go anywhere, and a 250m pod that must be on-demand
    on_demand = {"karpenter.sh/capacity-type": "on-demand"}
    pods = [pod("big-0", cpu=3000), pod("small-0", cpu=250), pod("od-0", cpu=250, node_selector=on_demand)]
    snap = world(pods, pools=[_reserved_pool(["reserved", "on-demand"])],
                 reservations={"default": (_cr("cr-1", available=1),)})
    # When planned THEN the small pod shares the reserved node; the on-demand one never does
    result = plan_reserved_first(snap)
    check_plan(snap, result)
    by_ct = {ln.capacity_type: set(ln.pods) for ln in result.launches}
    assert {"default/big-0", "default/small-0"} <= by_ct["reserved"]
    assert "default/od-0" in by_ct["on-demand"]


def test_a_reserved_only_pool_leaves_the_rest_pending_with_a_reason() -> None:
    snap = world([pod(f"train-{i}", cpu=3000) for i in range(3)], pools=[_reserved_pool(["reserved"])],
                 reservations={"default": (_cr("cr-1", available=1),)})
    result = plan_reserved_first(snap)
    check_plan(snap, result)
    assert [ln.capacity_type for ln in result.launches] == ["reserved"]
    assert len(result.unschedulable) == 2
    assert all("allows only karpenter.sh/capacity-type reserved" in u.reason for u in result.unschedulable)


def _launch(ct: str) -> Launch:
    return Launch(node_pool="default", node_class="default", capacity_type=ct, zones=("us-east-1a",),
                  instance_types=("m5.xlarge",), pods=("default/a",), labels={}, taints=(), startup_taints=(),
                  hourly_price=0.0, capacity_types=("on-demand",))


@pytest.mark.parametrize(("values", "terms", "ct", "want"), [
    (["reserved", "on-demand"], True, "reserved", ("reserved", "on-demand")),
    (["reserved", "on-demand"], True, "on-demand", ("on-demand",)),  # planned on-demand: no reservation tried
    (["reserved", "on-demand"], False, "reserved", ("on-demand",)),  # no terms: nothing to target
    (["reserved"], True, "reserved", ("reserved",)),
])
def test_launcher_preference(values: list[str], terms: bool, ct: str, want: tuple[str, ...]) -> None:
    spec: dict[str, Any] = {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                            "subnetSelectorTerms": [{"id": "s"}], "securityGroupSelectorTerms": [{"id": "g"}]}
    if terms:
        spec["capacityReservationSelectorTerms"] = [{"id": "cr-0abc"}]
    nc = parse_node_class({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                           "metadata": {"name": "default"}, "spec": spec})
    p = _reserved_pool(values)
    request = fleet_request_for(_launch(ct), cluster_name="c", node_pools={"default": p}, node_classes={"default": nc})
    assert request.capacity_types == want


def test_launcher_refuses_a_reserved_only_launch_without_reservations() -> None:
    nc = parse_node_class({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                           "metadata": {"name": "default"},
                           "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                                    "subnetSelectorTerms": [{"id": "s"}], "securityGroupSelectorTerms": [{"id": "g"}]}})
    with pytest.raises(ConfigError, match=r"allows only karpenter\.sh/capacity-type reserved"):
        fleet_request_for(_launch("reserved"), cluster_name="c", node_pools={"default": _reserved_pool(["reserved"])},
                          node_classes={"default": nc})
