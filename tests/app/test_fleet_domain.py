"""The pure fleet vocabulary: claim ids, launch tags and ownership, the unavailable-offerings cache."""

from __future__ import annotations

import pytest

from autoscaler.adapters.aws.unavailable import UnavailableOfferings
from autoscaler.adapters.clock import ManualClock
from autoscaler.app.launcher import new_claim_id
from autoscaler.domain.fleet import FleetError, FleetRequest, FleetResult
from autoscaler.domain.keys import MANAGED_BY_TAG, NODECLAIM_TAG
from autoscaler.domain.nodeclass import parse_node_class
from autoscaler.domain.ownership import is_owned, launch_tags

NC = parse_node_class({"metadata": {"name": "default"}, "spec": {
    "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "NodeRole",
    "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]}})


def test_claim_ids_are_unique_and_named_after_the_pool() -> None:
    ids = {new_claim_id("general") for _ in range(200)}
    assert len(ids) == 200 and all(i.startswith("general-") and len(i) == len("general-") + 8 for i in ids)
    assert new_claim_id().startswith("nodeclaim-")


def test_node_class_tags_cannot_override_ownership() -> None:
    tags = launch_tags(cluster_name="prod", node_pool="p", node_class="default", claim_id="p-1",
                       extra={MANAGED_BY_TAG: "someone-else", NODECLAIM_TAG: "x", "Name": "mine", "team": "a"})
    assert tags[MANAGED_BY_TAG] == "prod" and tags[NODECLAIM_TAG] == "p-1"
    assert tags["Name"] == "mine" and tags["team"] == "a"
    assert is_owned(tags, "prod") and not is_owned(tags, "staging")


def test_unavailable_offerings_expire_after_three_minutes() -> None:
    clock = ManualClock()
    cache = UnavailableOfferings(clock)
    cache.mark("m5.large", "us-east-1a", "spot")
    clock.advance(100)
    cache.mark("c5.large", "us-east-1b", "on-demand")
    assert cache.is_unavailable("m5.large", "us-east-1a", "spot")
    assert not cache.is_unavailable("m5.large", "us-east-1a", "on-demand")
    assert cache.snapshot() == {("m5.large", "us-east-1a", "spot"), ("c5.large", "us-east-1b", "on-demand")}
    clock.advance(80)  # 180 s after the first mark
    assert cache.snapshot() == {("c5.large", "us-east-1b", "on-demand")}
    assert not cache.is_unavailable("m5.large", "us-east-1a", "spot")
    clock.advance(100)
    assert len(cache) == 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [({"count": 0}, "count must be >= 1"), ({"capacity_types": ()}, "capacity_types is empty"),
     ({"instance_types": ()}, "instance_types is empty")],
)
def test_fleet_request_rejects_nonsense(kw: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"claim_id": "p-1", "cluster_name": "prod", "node_pool": "p", "node_class": NC,
                               "capacity_types": ("spot",), "instance_types": ("m5.large",)}
    base.update(kw)
    with pytest.raises(ValueError, match=message):
        FleetRequest(**base)  # type: ignore[arg-type]


def test_fleet_result_accounting() -> None:
    result = FleetResult(requested=3)
    result.errors.append(FleetError(code="VcpuLimitExceeded", message="quota"))
    assert result.missing == 3 and not result.complete and result.errors[0].is_capacity_error
    assert not FleetError(code="InvalidParameterValue", message="x").is_capacity_error
