"""Reserved capacity on moto, with moto's missing capacity-reservation API supplied by the stub
(simulator/ec2_reservations.py): reservations selected by id and by tags, launched into first with the
reservation as the launch template's target, counted within and across launches, and the fallback to
on-demand when a reservation is full or EC2 says so."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.app.launcher import new_claim_id
from autoscaler.domain.fleet import FleetRequest, in_flight_node
from autoscaler.domain.keys import CAPACITY_RESERVATION_ID_LABEL, CAPACITY_TYPE_LABEL
from autoscaler.domain.nodeclass import NodeClass
from simulator.ec2_reservations import CapacityReservationStub
from tests.adapters.aws.helpers import CLUSTER, CapacityFault, node_class

ZONE = "us-east-1a"


@pytest.fixture
def stub(ec2: Any) -> CapacityReservationStub:
    built = CapacityReservationStub()
    built.install(ec2.meta.events, lambda: ec2)
    return built


def _reserved_class(*terms: dict[str, Any]) -> NodeClass:
    return node_class(capacityReservationSelectorTerms=list(terms) or [{"tags": {"team": "ml"}}])


def _request(nc: NodeClass, *, count: int = 1, types: tuple[str, ...] = ("m5.large", "m5.xlarge"),
             cts: tuple[str, ...] = ("reserved", "on-demand")) -> FleetRequest:
    return FleetRequest(claim_id=new_claim_id("gpu"), cluster_name=CLUSTER.name, node_pool="gpu", node_class=nc,
                        capacity_types=cts, instance_types=types, zones=(ZONE, "us-east-1b"),  # type: ignore[arg-type]
                        count=count)


def test_terms_select_by_id_and_by_tags_of_one_owner(cloud: AwsCloud, stub: CapacityReservationStub) -> None:
    # Given three reservations: one named by id, one tagged for the team, one of another team
    by_id = stub.add("m5.large", ZONE, 1)
    tagged = stub.add("m5.xlarge", ZONE, 2, tags={"team": "ml"})
    stub.add("m5.xlarge", ZONE, 2, tags={"team": "web"})
    stub.add("m5.xlarge", ZONE, 2, tags={"team": "ml"}, owner_id="210987654321")
    nc = _reserved_class({"id": by_id}, {"tags": {"team": "ml"}, "ownerID": "123456789012"})
    # When the node class's reservations are resolved
    found = cloud.reservations.for_node_class(nc)
    # Then exactly the named and the team's own are selected, once each, with EC2's counts
    assert [(r.reservation_id, r.available) for r in found] == [(by_id, 1), (tagged, 2)]
    # And they are cached like subnets: a second resolution calls EC2 no more
    calls = cloud.calls.get("describe_capacity_reservations", 0)
    cloud.reservations.for_node_class(nc)
    assert cloud.calls.get("describe_capacity_reservations", 0) == calls


def test_reserved_is_launched_first_targeting_the_reservation(ec2: Any, cloud: AwsCloud,
                                                              stub: CapacityReservationStub) -> None:
    # Given a reservation of two m5.xlarge (not the cheapest type of the launch)
    rid = stub.add("m5.xlarge", ZONE, 2, tags={"team": "ml"})
    fault = CapacityFault().install(ec2)
    # When one node is launched with reserved allowed
    result = cloud.launch(_request(_reserved_class()))
    # Then it runs in the reservation: one override (its type and zone), an on-demand fleet, and a
    # launch template whose CapacityReservationSpecification targets the reservation
    assert result.complete and not result.errors
    [launched] = result.launched
    assert (launched.capacity_type, launched.instance_type, launched.zone) == ("reserved", "m5.xlarge", ZONE)
    [sent] = fault.requests
    assert sent["TargetCapacitySpecification"] == {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"}
    [config] = sent["LaunchTemplateConfigs"]
    assert [(o["InstanceType"], o["AvailabilityZone"]) for o in config["Overrides"]] == [("m5.xlarge", ZONE)]
    [version] = ec2.describe_launch_template_versions(
        LaunchTemplateId=config["LaunchTemplateSpecification"]["LaunchTemplateId"])["LaunchTemplateVersions"]
    assert version["LaunchTemplateData"]["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": rid}}
    # And the node registers with Karpenter's labels for it (kubelet's node labels, in the user data)
    user_data = base64.b64decode(version["LaunchTemplateData"]["UserData"]).decode()
    for label in (f"karpenter.k8s.aws/capacity-reservation-id={rid}", "karpenter.sh/capacity-type=reserved",
                  "karpenter.k8s.aws/capacity-reservation-type=default"):
        assert label in user_data
    # And EC2 (the stub) counts it against the reservation and names it on the instance
    assert stub.reservations[rid].available == 1
    assert [launch.reservation_id for launch in stub.launches] == [rid]
    [instance] = cloud.describe_instances([launched.instance_id])
    assert (instance.capacity_type, instance.reservation_id) == ("reserved", rid)
    flight = in_flight_node(instance)
    assert flight is not None
    assert flight.labels[CAPACITY_TYPE_LABEL] == "reserved"
    assert flight.labels[CAPACITY_RESERVATION_ID_LABEL] == rid


def test_counts_decrement_within_and_across_launches_then_fall_back(cloud: AwsCloud,
                                                                    stub: CapacityReservationStub) -> None:
    # Given a reservation of 3
    rid = stub.add("m5.large", ZONE, 3, tags={"team": "ml"})
    nc = _reserved_class()
    # When 2 nodes are launched, then 2 more (the reservation's description is cached in between)
    first = cloud.launch(_request(nc, count=2))
    second = cloud.launch(_request(nc, count=2))
    # Then the first two and one of the next run in the reservation; the fourth falls back to on-demand
    assert [i.capacity_type for i in first.launched] == ["reserved", "reserved"]
    assert sorted(i.capacity_type for i in second.launched) == ["on-demand", "reserved"]
    assert cloud.reservations.remaining(rid) == 0 and stub.reservations[rid].available == 0
    # And a third launch does not try the full reservation at all
    launches = len(stub.launches)
    third = cloud.launch(_request(nc))
    assert [i.capacity_type for i in third.launched] == ["on-demand"]
    assert len(stub.launches) == launches
    assert any(e.code == "NoReservedCapacityLeft" for e in third.errors)


def test_a_full_reservation_is_marked_and_the_launch_falls_back(cloud: AwsCloud, stub: CapacityReservationStub) -> None:
    # Given a reservation described with room, then taken by someone else (EC2 answers
    # ReservationCapacityExceeded)
    rid = stub.add("m5.large", ZONE, 1, tags={"team": "ml"})
    nc = _reserved_class()
    assert cloud.reservations.for_node_class(nc)[0].available == 1
    stub.reservations[rid].available = 0
    # When a node is launched
    result = cloud.launch(_request(nc))
    # Then it launches on-demand, the error is reported and the reservation is not tried again
    assert [i.capacity_type for i in result.launched] == ["on-demand"]
    assert any(e.code == "ReservationCapacityExceeded" for e in result.errors)
    assert cloud.reservations.remaining(rid) == 0


def test_reserved_only_launch_fails_cleanly_when_exhausted(cloud: AwsCloud, stub: CapacityReservationStub) -> None:
    # Given an exhausted reservation and a NodePool that allows only reserved
    stub.add("m5.large", ZONE, 0, tags={"team": "ml"})
    # When a node is launched
    result = cloud.launch(_request(_reserved_class(), cts=("reserved",)))
    # Then nothing launches and the error says why
    assert not result.launched
    [error] = result.errors
    assert error.code == "NoReservedCapacityLeft" and "EC2NodeClass default" in error.message


def test_an_expiring_capacity_block_takes_no_launch(cloud: AwsCloud, stub: CapacityReservationStub) -> None:
    # Given a Capacity Block ending in 30 minutes (inside Karpenter's 40-minute lead)
    now = cloud.clock.now()
    stub.add("m5.large", ZONE, 4, capacity_block=True, end_date=now + 30 * 60, tags={"team": "ml"})
    # When a node is launched
    result = cloud.launch(_request(_reserved_class()))
    # Then it goes on-demand
    assert [i.capacity_type for i in result.launched] == ["on-demand"]


def test_terminating_gives_the_capacity_back(cloud: AwsCloud, stub: CapacityReservationStub) -> None:
    rid = stub.add("m5.large", ZONE, 1, tags={"team": "ml"})
    [launched] = cloud.launch(_request(_reserved_class())).launched
    assert stub.reservations[rid].available == 0
    cloud.terminate([launched.instance_id])
    assert stub.reservations[rid].available == 1
