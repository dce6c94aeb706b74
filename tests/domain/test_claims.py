"""The pure decisions over stored node claims (``domain/claims.py``) and the claim's stored form."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

import pytest

from autoscaler.domain.claims import (
    LAUNCH_GIVE_UP_SECONDS,
    LAUNCH_SETTLE_SECONDS,
    Claim,
    claims_for,
    reconcile_claims,
)
from autoscaler.domain.fleet import CloudInstance
from autoscaler.domain.keys import NODECLAIM_TAG, NODEPOOL_TAG
from autoscaler.domain.models import Taint
from autoscaler.domain.plan import InFlightNode, Launch
from autoscaler.domain.scheduling import plan
from tests.domain.scheduling_world import pod, pool, world

NOW = 1_800_000_000.0


def launch(*pods: str, zones: tuple[str, ...] = ("us-east-1a", "us-east-1b")) -> Launch:
    return Launch(node_pool="default", node_class="default", capacity_type="spot", zones=zones,
                  instance_types=("m5.large", "m5.xlarge"), pods=pods, labels={"team": "a"},
                  taints=(Taint(key="dedicated", value="x", effect="NoSchedule"),), startup_taints=(),
                  hourly_price=0.04, capacity_types=("spot", "on-demand"))


def instance(iid: str, claim: str, *, state: str = "running") -> CloudInstance:
    return CloudInstance(instance_id=iid, instance_type="m5.large", zone="us-east-1b", state=state,
                         capacity_type="spot", launch_time=NOW, tags={NODECLAIM_TAG: claim, NODEPOOL_TAG: "default"})


def group(*pods: tuple[str, ...], age: float = 0.0) -> list[Claim]:
    launches = [launch(*p) for p in pods]
    return claims_for(launches, [f"default-{i}" for i in range(len(launches))], now=NOW - age)


def test_claims_of_one_fleet_share_its_group_and_keep_their_own_pods() -> None:
    claims = group(("ns/a", "ns/b"), ("ns/c",))
    assert [c.group for c in claims] == ["default-0", "default-0"] and {c.group_size for c in claims} == {2}
    assert [c.pods for c in claims] == [("ns/a", "ns/b"), ("ns/c",)]
    assert claims[0].capacity_types == ("spot", "on-demand")
    # the stored form round-trips, taints and labels included
    back = Claim.from_json(claims[0].to_json())
    assert back == claims[0]
    done = claims[0].launched(instance_id="i-1", instance_type="m5.large", zone="us-east-1a", capacity_type="spot")
    assert Claim.from_json(done.to_json()) == done


@pytest.mark.parametrize("text", ["{}", "not json", '{"id": "x", "state": "gone"}'])
def test_a_malformed_stored_claim_is_a_value_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=r"malformed node claim|state"):
        Claim.from_json(text)


def test_a_young_launching_claim_is_in_flight_capacity_for_its_pods() -> None:
    claims = group(("ns/a",), ("ns/b",))
    d = reconcile_claims(claims, listed=[], registered=set(), pending={"ns/a", "ns/b"}, now=NOW)
    assert [f.pod_keys for f in d.in_flight] == [("ns/a",), ("ns/b",)]
    # before EC2 answered: the cheapest planned type, the zone only when pinned to one, the first capacity type
    f = d.in_flight[0]
    assert (f.instance_type, f.zone, f.capacity_type, f.labels["team"]) == ("m5.large", "", "spot", "a")
    assert f.taints == (Taint(key="dedicated", value="x", effect="NoSchedule"),)
    assert d.resume == [] and d.finished == [] and d.adopted == []
    pinned = claims_for([launch("ns/z", zones=("us-east-1c",))], ["default-z"], now=NOW)
    assert reconcile_claims(pinned, listed=[], registered=(), pending=(), now=NOW).in_flight[0].zone == "us-east-1c"


def test_instances_tagged_with_the_claim_or_its_group_are_adopted() -> None:
    claims = group(("ns/a",), ("ns/b",), ("ns/c",))
    # one instance was re-tagged with its own claim, the other two still carry the group's
    listed = [instance("i-2", "default-2"), instance("i-0", "default-0"), instance("i-1", "default-0")]
    d = reconcile_claims(claims, listed=listed, registered=set(), pending=set(), now=NOW)
    assert {c.claim_id: c.instance_id for c in d.adopted} == {"default-0": "i-0", "default-1": "i-1",
                                                              "default-2": "i-2"}
    assert all(c.state == "launched" for c in d.adopted)
    assert {f.instance_id for f in d.in_flight} == set() and d.resume == []


def test_a_stale_launching_claim_with_pending_pods_is_resumed_and_without_them_finished() -> None:
    stale = group(("ns/a",), ("ns/b",), age=LAUNCH_SETTLE_SECONDS + 1)
    d = reconcile_claims(stale, listed=[], registered=set(), pending={"ns/b"}, now=NOW)
    assert [[c.claim_id for c in g] for g in d.resume] == [["default-0", "default-1"]]
    assert d.in_flight == []  # the caller counts them once the resumed launch answers
    gone = reconcile_claims(stale, listed=[], registered=set(), pending=set(), now=NOW)
    assert gone.resume == [] and sorted(gone.finished) == ["default-0", "default-1"]
    given_up = group(("ns/a",), age=LAUNCH_GIVE_UP_SECONDS + 1)
    assert reconcile_claims(given_up, listed=[], registered=set(), pending={"ns/a"}, now=NOW).finished == ["default-0"]


def test_a_launched_claim_is_capacity_until_its_node_registers_or_its_instance_goes() -> None:
    [c] = group(("ns/a",))
    c = c.launched(instance_id="i-9", instance_type="m5.xlarge", zone="us-east-1a", capacity_type="on-demand")
    # unlisted (DescribeInstances lags): capacity, with the type EC2 chose
    d = reconcile_claims([c], listed=[], registered=set(), pending={"ns/a"}, now=NOW)
    [f] = d.in_flight
    assert (f.instance_id, f.instance_type, f.zone, f.capacity_type) == ("i-9", "m5.xlarge", "us-east-1a", "on-demand")
    # listed: the claim's record wins (it knows the pods exactly)
    listed = reconcile_claims([c], listed=[instance("i-9", "x")], registered=set(), pending=(), now=NOW)
    assert len(listed.in_flight) == 1
    # registered but not initialised: its pods stay pinned to the node (not in flight any more)
    pinned = reconcile_claims([c], listed=[], registered={"i-9"}, pending=(), now=NOW)
    assert pinned.pinned == {"i-9": ("ns/a",)} and pinned.in_flight == [] and pinned.finished == []
    # initialised, or going away: finished
    done = reconcile_claims([c], listed=[], registered={"i-9"}, initialized={"i-9"}, pending=(), now=NOW)
    assert done.finished == ["default-0"] and done.pinned == {}
    dying = [instance("i-9", "default-0", state="shutting-down")]
    assert reconcile_claims([c], listed=dying, registered=set(), pending=(), now=NOW).finished == ["default-0"]
    # never listed for an hour: finished
    old = replace(c, created_at=NOW - 4000)
    assert reconcile_claims([old], listed=[], registered=set(), pending=(), now=NOW).finished == ["default-0"]


def test_an_instance_another_claim_holds_is_never_adopted_twice() -> None:
    a, b = group(("ns/a",), ("ns/b",))
    a = a.launched(instance_id="i-0", instance_type="m5.large", zone="us-east-1a", capacity_type="spot")
    d = reconcile_claims([a, b], listed=[instance("i-0", "default-0")], registered=set(), pending={"ns/b"}, now=NOW)
    assert d.adopted == [] and [f.instance_id for f in d.in_flight] == ["i-0", "claim/default-1"]


def test_a_launch_whose_answer_is_unknown_counts_its_largest_type_against_the_limit() -> None:
    # GIVEN a pool limited to 8 vCPU and a launching claim (no answer yet) that EC2 may have filled with
    # an m5.large (2 vCPU) or an m5.2xlarge (8 vCPU)
    spot_od = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]
    [claim] = claims_for([replace(launch("default/other"), instance_types=("m5.large", "m5.2xlarge"))],
                         ["default-0"], now=NOW)
    flying = reconcile_claims([claim], listed=[], registered=(), pending=(), now=NOW).in_flight
    snap = world([pod("new-0", cpu=1500)], pools=[pool(requirements=spot_od, limits={"cpu": "8"})],
                 in_flight=flying)
    # THEN nothing more is launched: had EC2 chosen the 8-vCPU type, the pool would be over its limit
    result = plan(snap)
    assert result.launches == [] and "limit" in result.unschedulable[0].reason
    # and once the answer is known (2 vCPU), the rest of the limit is usable again
    known = claim.launched(instance_id="i-1", instance_type="m5.large", zone="us-east-1a", capacity_type="spot")
    snap.in_flight = reconcile_claims([known], listed=[], registered=(), pending=(), now=NOW).in_flight
    assert len(plan(snap).launches) == 1


def test_zones_without_a_subnet_of_the_node_class_are_never_planned() -> None:
    spot_od = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]
    snap = world([pod(f"p-{i}", cpu=1500) for i in range(6)], pools=[pool(requirements=spot_od)],
                 node_class_zones={"default": frozenset({"us-east-1c"})})
    result = plan(snap)
    assert result.launches and {z for launch in result.launches for z in launch.zones} == {"us-east-1c"}
    # unknown subnets (not resolved): every offering's zone stays possible
    snap.node_class_zones = {}
    assert len({z for launch in plan(snap).launches for z in launch.zones}) > 1


def test_a_pod_its_first_instance_cannot_hold_is_tried_on_the_next_instance_that_names_it() -> None:
    # GIVEN two in-flight instances that both name pod p-0 (a lost claim's tags and its resumed sibling);
    # the first (an m5.large) is full with p-1, the second has room for p-0; a new pod q-0, bigger, has
    # no instance yet and would take the second's room if p-0 were not put back there first
    snap = world([pod("p-0", cpu=1500), pod("p-1", cpu=1500), pod("q-0", cpu=1800)])
    snap.in_flight = [
        InFlightNode(instance_id="i-1", node_pool="default", instance_type="m5.large", zone="us-east-1a",
                     capacity_type="spot", pod_keys=("default/p-1", "default/p-0")),
        InFlightNode(instance_id="i-2", node_pool="default", instance_type="m5.large", zone="us-east-1a",
                     capacity_type="spot", pod_keys=("default/p-0",)),
    ]
    result = plan(snap)
    # THEN p-0 stays on an instance launched for it, and only q-0 gets a new node
    assert result.existing == {"default/p-1": "i-1", "default/p-0": "i-2"}
    assert [launch.pods for launch in result.launches] == [("default/q-0",)]


def test_a_launched_claim_whose_instance_ended_out_of_view_is_finished_not_phantom_capacity() -> None:
    # Given a launched claim whose node registered and was then consolidated (Node deleted, instance
    # terminated) between two passes, so no pass saw it initialised and the live listing no longer has it
    from autoscaler.app.claims import ClaimBook, MemoryClaimStore

    [c] = group(("ns/a",), age=LAUNCH_SETTLE_SECONDS + 1)
    c = c.launched(instance_id="i-9", instance_type="m5.xlarge", zone="us-east-1a", capacity_type="on-demand")
    asked: list[list[str]] = []

    def ec2_says(state: str | None) -> Callable[[Collection[str]], list[CloudInstance]]:
        def describe(ids: Collection[str]) -> list[CloudInstance]:  # DescribeInstances by id
            asked.append(sorted(ids))
            return [] if state is None else [instance("i-9", "x", state=state)]  # None: not found
        return describe

    def reconcile(describe: Callable[[Collection[str]], list[CloudInstance]],
                  claim: Claim = c) -> tuple[list[InFlightNode], list[Claim]]:
        store = MemoryClaimStore()
        store.create([claim])
        out = ClaimBook(store).reconcile(listed=[], registered=set(), pending={"ns/a"}, now=NOW, resume=None,
                                         describe=describe)
        return out.in_flight, store.claims()

    # When EC2 reports the instance terminated: the claim is finished, its pods are no longer "in flight"
    in_flight, left = reconcile(ec2_says("terminated"))
    assert in_flight == [] and left == [] and asked == [["i-9"]]
    # When EC2 does not know the id (yet): it stays capacity until the TTL, as before
    in_flight, left = reconcile(ec2_says(None))
    assert [f.instance_id for f in in_flight] == ["i-9"] and left == [c]
    # A claim launched moments ago is not asked about: EC2 may simply not list it yet
    asked.clear()
    in_flight, _ = reconcile(ec2_says("terminated"), replace(c, created_at=NOW))
    assert asked == [] and len(in_flight) == 1
