"""Issue 33 item 9: the on-demand fallback of a spot launch chooses from everything the NodePool allows
on-demand, cheapest on-demand first, not only from the spot request's instance types."""

from __future__ import annotations

from autoscaler.domain.claims import Claim, claims_for
from autoscaler.domain.scheduling import plan
from tests.domain.scheduling_world import GI, check_plan, offerings, pod, pool, world


def test_issue33_item_9_on_demand_fallback_offers_the_cheapest_on_demand_type_the_pool_allows() -> None:
    # Given a database pod that fits m5.xlarge and r5.xlarge, and m5.xlarge has no spot offering
    offers = [o for o in offerings() if not (o.instance_type == "m5.xlarge" and o.capacity_type == "spot")]
    snap = world([pod("db-0", 3000, 12 * GI)], offers=offers)
    result = plan(snap)
    check_plan(snap, result)
    [launch] = result.launches
    # Then the node is planned on spot, without m5.xlarge among its types
    assert launch.capacity_type == "spot" and "m5.xlarge" not in launch.instance_types
    assert "r5.xlarge" in launch.instance_types
    # And its on-demand fallback starts with m5.xlarge ($0.192/h), before r5.xlarge ($0.252/h)
    fallback = launch.fallback_instance_types["on-demand"]
    assert fallback[0] == "m5.xlarge"
    assert fallback.index("m5.xlarge") < fallback.index("r5.xlarge")


def test_issue33_item_9_a_pool_with_one_capacity_type_has_no_fallback() -> None:
    spot_only = pool(requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])
    [launch] = plan(world([pod("db-0", 3000, 12 * GI)], pools=[spot_only])).launches
    assert launch.capacity_type == "spot" and dict(launch.fallback_instance_types) == {}


def test_issue33_item_9_a_stored_claim_keeps_the_fallback_types_for_a_resumed_launch() -> None:
    offers = [o for o in offerings() if not (o.instance_type == "m5.xlarge" and o.capacity_type == "spot")]
    [launch] = plan(world([pod("db-0", 3000, 12 * GI)], offers=offers)).launches
    [claim] = claims_for([launch], ["db-abc12345"], now=1.0)
    stored = Claim.from_json(claim.to_json())
    # A resumed launch sends what was first sent (same client tokens, same parameters)
    assert stored.as_launch().fallback_instance_types == launch.fallback_instance_types
    # And until it launched, the claim may turn out to be any type it may fall back to
    assert "m5.xlarge" in stored.in_flight().may_be
