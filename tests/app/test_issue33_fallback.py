"""Issue 33 item 9: the launcher hands the planned on-demand fallback types to the cloud request."""

from __future__ import annotations

from autoscaler.app.launcher import fleet_request_for
from autoscaler.domain.scheduling import plan
from tests.domain.scheduling_world import GI, NODE_CLASS, offerings, pod, world


def test_issue33_item_9_fleet_request_falls_back_to_the_pools_on_demand_types() -> None:
    offers = [o for o in offerings() if not (o.instance_type == "m5.xlarge" and o.capacity_type == "spot")]
    snap = world([pod("db-0", 3000, 12 * GI)], offers=offers)
    [launch] = plan(snap).launches
    request = fleet_request_for(launch, cluster_name="c", node_pools={p.name: p for p in snap.node_pools},
                                node_classes={"default": NODE_CLASS})
    assert request.capacity_types == ("spot", "on-demand")
    assert request.instance_types_for("spot") == launch.instance_types
    assert request.instance_types_for("on-demand")[0] == "m5.xlarge"
