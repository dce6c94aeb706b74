"""Issue 33 item 9 on moto: after spot capacity errors, the on-demand CreateFleet offers the request's
on-demand fallback types (everything the NodePool allows on-demand, cheapest first), not the spot types."""

from __future__ import annotations

from typing import Any

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.app.launcher import new_claim_id
from autoscaler.domain.fleet import FleetRequest
from tests.adapters.aws.helpers import CLUSTER, CapacityFault, node_class

ZONES = ("us-east-1a", "us-east-1b")


def test_issue33_item_9_on_demand_fallback_launches_from_the_on_demand_types(ec2: Any, cloud: AwsCloud) -> None:
    spot_types = ("r5.xlarge", "m5.2xlarge")
    request = FleetRequest(
        claim_id=new_claim_id("db"), cluster_name=CLUSTER.name, node_pool="db", node_class=node_class(),
        capacity_types=("spot", "on-demand"), instance_types=spot_types, zones=ZONES,
        fallback_instance_types={"on-demand": ("m5.xlarge", "r5.xlarge", "m5.2xlarge")})
    # Given EC2 has no spot capacity for the spot request's types
    failing = {(t, z): "InsufficientInstanceCapacity" for t in spot_types for z in ZONES}
    fault = CapacityFault(failing=failing, only_capacity_type="spot").install(ec2)
    result = cloud.launch(request)
    # Then the on-demand request offers m5.xlarge first, and that is what launched
    assert result.complete
    spot, on_demand = fault.requests
    assert {o["InstanceType"] for c in spot["LaunchTemplateConfigs"] for o in c["Overrides"]} == set(spot_types)
    offered = [o["InstanceType"] for c in on_demand["LaunchTemplateConfigs"] for o in c["Overrides"]]
    assert offered[0] == "m5.xlarge" and set(offered) == {"m5.xlarge", "r5.xlarge", "m5.2xlarge"}
    assert [(i.instance_type, i.capacity_type) for i in result.launched] == [("m5.xlarge", "on-demand")]
