"""Issue 33 item 11: after an uncertain CreateFleet, nothing launches the same claim under another capacity
type with a new token. On the strict client-token stand-in (simulator/ec2_tokens.py, as strict as EC2)
and a NodePool that allows spot and on-demand, so a fallback would be possible."""

from __future__ import annotations

import copy
from typing import Any

from simulator.local import LocalCluster, demo_config
from tests.e2e.conftest import make_local
from tests.e2e.test_provisioner import count_create_fleet


def _spot_and_on_demand() -> list[dict[str, Any]]:
    pools = copy.deepcopy(demo_config().node_pools)
    for req in pools[0]["spec"]["template"]["spec"]["requirements"]:
        if req["key"] == "karpenter.sh/capacity-type":
            req["values"] = ["spot", "on-demand"]
    return pools


def _live(env: LocalCluster) -> list[str]:
    return sorted(i.instance_id for i in env.instances() if i.state not in ("terminated", "shutting-down"))


def test_item11_an_uncertain_create_fleet_is_never_retried_under_another_capacity_type(
        moto_server: Any, local_catalog: Any) -> None:
    with make_local(moto_server, local_catalog, nodePools=_spot_and_on_demand()) as local:
        calls = count_create_fleet(local)
        local.runtime()
        # Given every CreateFleet answer is lost after EC2 acted (botocore resends; the last times out)
        local.tokens.lose_responses(100)
        local.scale("inflate", 5)
        first = local.invoke_provisioner()["passes"][0]
        assert first["launched"] == [] and "ReadTimeoutError" in " ".join(first["failures"])
        # Then only the spot request was made, each claim under one token: no on-demand fallback
        kinds = {c["TargetCapacitySpecification"]["DefaultTargetCapacityType"] for c in calls}
        tokens = {c["ClientToken"] for c in calls}
        assert kinds == {"spot"} and local.tokens.mismatched == 0
        launched_first = _live(local)
        # When the answers come back and the next passes run (a new container)
        local.tokens.lose_responses(0)
        local.runtime()
        for _ in range(2):
            local.invoke_provisioner()
        # Then the instances EC2 launched are the claims' and nothing was launched under a new token
        assert _live(local) == launched_first
        assert {c["TargetCapacitySpecification"]["DefaultTargetCapacityType"] for c in calls} == {"spot"}
        assert {c["ClientToken"] for c in calls} <= tokens
