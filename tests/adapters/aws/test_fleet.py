"""CreateFleet launches on moto: overrides, tags, capacity errors (injected through botocore events),
the 3-minute unavailable-offerings cache and the spot -> on-demand fallback."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.aws.fleet import client_token
from autoscaler.adapters.clock import ManualClock
from autoscaler.app.launcher import new_claim_id
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.fleet import FleetRequest
from autoscaler.domain.keys import EKS_CLUSTER_TAG, MANAGED_BY_TAG, NODECLAIM_TAG, NODECLASS_TAG, NODEPOOL_TAG
from autoscaler.domain.models import Taint
from autoscaler.domain.ownership import pod_tag_budget, pod_tags, pods_from_tags
from autoscaler.domain.spec_hash import node_class_hash
from tests.adapters.aws.helpers import (
    CLUSTER,
    CapacityFault,
    Network,
    builtin_images,
    instances_by_id,
    node_class,
    put_public_parameter,
    tags_of,
)


def _request(**kw: Any) -> FleetRequest:
    base: dict[str, Any] = {
        "claim_id": new_claim_id("general"), "cluster_name": CLUSTER.name, "node_pool": "general",
        "node_class": node_class(tags={"cost-center": "42"}), "capacity_types": ("spot", "on-demand"),
        "instance_types": ("m5.large", "m5a.large"), "zones": ("us-east-1a", "us-east-1b"),
        "labels": {"team": "payments", "node.kubernetes.io/instance-type": "m5.large"},
        "taints": (Taint(key="dedicated", value="payments", effect="NoSchedule"),),
    }
    base.update(kw)
    return FleetRequest(**base)


def test_launch_sends_types_x_zone_subnets_and_tags_everything(ec2: Any, cloud: AwsCloud, network: Network) -> None:
    fault = CapacityFault().install(ec2)
    req = _request()
    result = cloud.launch(req)

    assert result.complete and not result.errors
    [sent] = fault.requests
    assert sent["Type"] == "instant"
    assert sent["TargetCapacitySpecification"] == {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"}
    assert sent["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    [config] = sent["LaunchTemplateConfigs"]
    assert [(o["InstanceType"], o["AvailabilityZone"], o["SubnetId"]) for o in config["Overrides"]] == [
        ("m5.large", "us-east-1a", network.subnets["us-east-1a"]),
        ("m5.large", "us-east-1b", network.subnets["us-east-1b"]),
        ("m5a.large", "us-east-1a", network.subnets["us-east-1a"]),
        ("m5a.large", "us-east-1b", network.subnets["us-east-1b"]),
    ]
    assert {s["ResourceType"] for s in sent["TagSpecifications"]} == {"instance", "volume", "fleet"}

    [launched] = result.launched
    assert (launched.capacity_type, launched.claim_id) == ("spot", req.claim_id)
    [raw] = instances_by_id(ec2, [launched.instance_id])
    assert raw["InstanceType"] == launched.instance_type == "m5.large"
    assert raw["Placement"]["AvailabilityZone"] == launched.zone == "us-east-1a"
    assert raw["InstanceLifecycle"] == "spot"
    tags = tags_of(raw)  # moto applies the instance TagSpecifications of an instant fleet
    assert tags[f"kubernetes.io/cluster/{CLUSTER.name}"] == "owned"
    assert (tags[EKS_CLUSTER_TAG], tags[MANAGED_BY_TAG]) == (CLUSTER.name, CLUSTER.name)
    assert (tags[NODEPOOL_TAG], tags[NODECLASS_TAG], tags[NODECLAIM_TAG]) == ("general", "default", req.claim_id)
    assert tags["Name"] == f"{CLUSTER.name}/{req.claim_id}" and tags["cost-center"] == "42"
    # moto tags the fleet too, but not the volumes of an instant fleet: the request above shows we ask.
    [fleet] = ec2.describe_fleets()["Fleets"]
    assert tags_of(fleet)[NODECLAIM_TAG] == req.claim_id

    # The launch template's user data carries the pool's labels (not per-instance ones) and taints.
    lt_id = config["LaunchTemplateSpecification"]["LaunchTemplateId"]
    lt = ec2.describe_launch_template_versions(LaunchTemplateId=lt_id)["LaunchTemplateVersions"][0]
    user_data = base64.b64decode(lt["LaunchTemplateData"]["UserData"]).decode()
    assert "karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=general,team=payments" in user_data
    assert "node.kubernetes.io/instance-type" not in user_data
    assert "dedicated=payments:NoSchedule,karpenter.sh/unregistered:NoExecute" in user_data


def test_on_demand_uses_lowest_price_and_arm_types_get_their_own_template(ec2: Any, cloud: AwsCloud) -> None:
    fault = CapacityFault().install(ec2)
    result = cloud.launch(_request(capacity_types=("on-demand",), instance_types=("m6g.large", "m5.large"), count=2))
    assert len(result.launched) == 2 and all(i.capacity_type == "on-demand" for i in result.launched)
    [sent] = fault.requests
    assert sent["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert sent["TargetCapacitySpecification"]["TotalTargetCapacity"] == 2
    per_template = [[o["InstanceType"] for o in c["Overrides"]] for c in sent["LaunchTemplateConfigs"]]
    assert sorted(per_template) == [["m5.large", "m5.large"], ["m6g.large", "m6g.large"]]


def test_capacity_error_marks_offering_and_retries_with_what_remains(ec2: Any, cloud: AwsCloud) -> None:
    fault = CapacityFault(failing={("m5.large", "us-east-1a"): "InsufficientInstanceCapacity",
                                   ("m5.large", "us-east-1b"): "InsufficientInstanceCapacity"}).install(ec2)
    result = cloud.launch(_request())
    # moto launches the first override it is given; with m5.large withheld that is m5a.large.
    assert [(i.instance_type, i.capacity_type) for i in result.launched] == [("m5a.large", "spot")]
    assert sorted((e.code, e.instance_type, e.zone, e.capacity_type) for e in result.errors) == [
        ("InsufficientInstanceCapacity", "m5.large", "us-east-1a", "spot"),
        ("InsufficientInstanceCapacity", "m5.large", "us-east-1b", "spot"),
    ]
    assert cloud.unavailable() == {("m5.large", "us-east-1a", "spot"), ("m5.large", "us-east-1b", "spot")}

    # Within 3 minutes the next launch does not even offer EC2 the failed offerings.
    fault.requests.clear()
    assert isinstance(cloud.clock, ManualClock)
    cloud.clock.advance(179)
    cloud.launch(_request())
    offered = {(o["InstanceType"], o["AvailabilityZone"]) for c in fault.requests[0]["LaunchTemplateConfigs"]
               for o in c["Overrides"]}
    assert offered == {("m5a.large", "us-east-1a"), ("m5a.large", "us-east-1b")}
    spot_offerings = {(o.instance_type, o.zone): o.available for o in cloud.offerings() if o.capacity_type == "spot"}
    assert spot_offerings[("m5.large", "us-east-1a")] is False and spot_offerings[("m5a.large", "us-east-1a")]

    # After 3 minutes they are tried again.
    cloud.clock.advance(2)
    assert cloud.unavailable() == frozenset()
    fault.requests.clear()
    fault.failing.clear()
    cloud.launch(_request())
    offered = {(o["InstanceType"], o["AvailabilityZone"]) for c in fault.requests[0]["LaunchTemplateConfigs"]
               for o in c["Overrides"]}
    assert ("m5.large", "us-east-1a") in offered


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "MaxSpotInstanceCountExceeded",
                                  "UnfulfillableCapacity", "SpotMaxPriceTooLow",
                                  "InsufficientFreeAddressesInSubnet", "VcpuLimitExceeded"])
def test_spot_exhausted_falls_back_to_on_demand(ec2: Any, cloud: AwsCloud, code: str) -> None:
    failing = {(t, z): code for t in ("m5.large", "m5a.large") for z in ("us-east-1a", "us-east-1b")}
    fault = CapacityFault(failing=failing, only_capacity_type="spot").install(ec2)
    result = cloud.launch(_request())
    assert [i.capacity_type for i in result.launched] == ["on-demand"]
    assert result.complete
    assert len([e for e in result.errors if e.code == code]) == 4
    assert [r["TargetCapacitySpecification"]["DefaultTargetCapacityType"] for r in fault.requests] == [
        "spot", "on-demand"]
    [raw] = instances_by_id(ec2, [result.launched[0].instance_id])
    assert "InstanceLifecycle" not in raw
    assert len(cloud.unavailable()) == 4


def test_spot_only_pool_reports_precisely_what_did_not_launch(ec2: Any, cloud: AwsCloud) -> None:
    failing = {(t, z): "InsufficientInstanceCapacity" for t in ("m5.large", "m5a.large")
               for z in ("us-east-1a", "us-east-1b")}
    CapacityFault(failing=failing).install(ec2)
    result = cloud.launch(_request(capacity_types=("spot",), count=3))
    assert result.launched == [] and result.missing == 3 and not result.complete
    assert {(e.instance_type, e.zone) for e in result.errors if e.is_capacity_error} == set(failing)
    assert result.errors[-1].code == "NoOfferingsLeft"
    assert "m5.large, m5a.large" in result.errors[-1].message


def test_partial_fleet_then_retry_fills_the_rest(ec2: Any, cloud: AwsCloud) -> None:
    """EC2 may launch some of the requested capacity and report errors for the rest."""
    fault = CapacityFault(failing={("m5.large", "us-east-1a"): "InsufficientInstanceCapacity"}).install(ec2)
    original = fault._after_call

    def partial(parsed: dict[str, Any], **kw: Any) -> None:
        if len(fault.requests) == 1:
            # Keep the first instance, pretend EC2 never launched the others.
            extra = [i for entry in parsed["Instances"][1:] for i in entry["InstanceIds"]]
            extra += parsed["Instances"][0]["InstanceIds"][1:]
            parsed["Instances"] = [{**parsed["Instances"][0], "InstanceIds": parsed["Instances"][0]["InstanceIds"][:1]}]
            ec2.terminate_instances(InstanceIds=extra)
        original(parsed, **kw)

    fault._after_call = partial  # type: ignore[method-assign]
    ec2.meta.events.unregister("after-call.ec2.CreateFleet", original)
    ec2.meta.events.register("after-call.ec2.CreateFleet", partial)
    result = cloud.launch(_request(count=2))
    assert len(result.launched) == 2
    assert [r["TargetCapacitySpecification"]["TotalTargetCapacity"] for r in fault.requests] == [2, 1]


def test_zone_restriction_and_unknown_types_are_respected(ec2: Any, cloud: AwsCloud) -> None:
    fault = CapacityFault().install(ec2)
    cloud.launch(_request(zones=("us-east-1c",), instance_types=("m5.large", "no-such.type")))
    [config] = fault.requests[0]["LaunchTemplateConfigs"]
    assert [(o["InstanceType"], o["AvailabilityZone"]) for o in config["Overrides"]] == [("m5.large", "us-east-1c")]


def test_gpu_types_get_the_accelerated_image_and_are_skipped_without_one(ec2: Any, cloud: AwsCloud) -> None:
    fault = CapacityFault().install(ec2)
    req = _request(capacity_types=("on-demand",), instance_types=("g5.xlarge", "m5.large"))
    cloud.launch(req)
    # No nvidia parameter yet: the GPU type is not offered rather than launched without drivers.
    [only] = fault.requests[0]["LaunchTemplateConfigs"]
    assert {o["InstanceType"] for o in only["Overrides"]} == {"m5.large"}

    nvidia = builtin_images(ec2)["amd64"]
    put_public_parameter(
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/nvidia/recommended/image_id", nvidia)
    cloud.amis._cache.clear()
    fault.requests.clear()
    cloud.launch(req)
    configs = fault.requests[0]["LaunchTemplateConfigs"]
    assert sorted({o["InstanceType"] for o in c["Overrides"]}.pop() for c in configs) == ["g5.xlarge", "m5.large"]
    sources = {cloud.amis.resolve(req.node_class, {"nvidia", "standard"})[k].source for k in
               ("amd64/nvidia", "amd64/standard")}
    assert any("/nvidia/" in s for s in sources) and any("/standard/" in s for s in sources)


class _Rejected:
    status_code = 400
    headers: dict[str, str] = {}
    content = b""


@pytest.mark.parametrize(("code", "marks"), [("VcpuLimitExceeded", True), ("InvalidParameterValue", False)])
def test_request_level_errors(ec2: Any, cloud: AwsCloud, code: str, marks: bool) -> None:
    """CreateFleet failing as a whole: a capacity code marks every offering tried; any other error is
    not retried for that capacity type. Either way the next capacity type is tried."""
    seen: list[str] = []

    def reject_spot(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]] | None:
        body = params.get("body", {})
        seen.append(body.get("TargetCapacitySpecification.DefaultTargetCapacityType", ""))
        if body.get("TargetCapacitySpecification.DefaultTargetCapacityType") != "spot":
            return None
        return _Rejected(), {"Error": {"Code": code, "Message": "rejected"},
                             "ResponseMetadata": {"RequestId": "req-1", "HTTPStatusCode": 400}}

    ec2.meta.events.register("before-call.ec2.CreateFleet", reject_spot)
    result = cloud.launch(_request())
    assert result.errors[0].code == code and result.errors[0].capacity_type == "spot"
    assert seen == ["spot", "on-demand"] and [i.capacity_type for i in result.launched] == ["on-demand"]
    marked = cloud.unavailable()
    assert (("m5a.large", "us-east-1b", "spot") in marked) is marks and (len(marked) == 4) is marks


def test_create_fleet_carries_a_client_token_that_botocore_retries_resend(ec2: Any, cloud: AwsCloud) -> None:
    # GIVEN the first CreateFleet response is "lost": botocore retries the same request
    tokens: list[str] = []

    def sent(request: Any, **_: Any) -> None:
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        tokens.extend(part.split("=", 1)[1] for part in body.split("&") if part.startswith("ClientToken="))

    def lose_first(attempts: int, **_: Any) -> int | None:
        return 0 if attempts == 1 else None

    ec2.meta.events.register("request-created.ec2.CreateFleet", sent)
    ec2.meta.events.register_first("needs-retry.ec2.CreateFleet", lose_first)
    request = _request()
    cloud.launch(request)
    # THEN both sends carry the same token (EC2 answers the retry with the fleet it already launched),
    # and the token is the launch's own: deterministic for the claim, distinct for another claim
    assert len(tokens) == 2 and tokens[0] == tokens[1] and tokens[0].startswith("esa-") and len(tokens[0]) <= 64
    assert tokens[0] == client_token(request.claim_id, "spot", 0) != client_token(new_claim_id("default"), "spot", 0)
    assert client_token(request.claim_id, "spot", 0) != client_token(request.claim_id, "spot", 1)
    assert client_token(request.claim_id, "spot", 0) != client_token(request.claim_id, "on-demand", 0)


def test_thirty_node_class_tags_leave_room_within_ec2s_limit(ec2: Any, cloud: AwsCloud) -> None:
    # GIVEN an EC2NodeClass with 30 tags and a node planned for 300 pods
    many = node_class(tags={f"team/label-{i:02d}": "x" * 40 for i in range(30)})
    keys = [f"payments-namespace/worker-{i:05d}-abcdefghij" for i in range(300)]
    # WHEN the pod keys are packed within the budget (wave 1 always allowed 20 pod tags: 9 + 30 + 20 = 59)
    budget = pod_tag_budget(many.tags)
    tags = pod_tags(keys, max_tags=budget)
    result = cloud.launch(_request(node_class=many, tags=tags, capacity_types=("on-demand",), node_pool_hash="1"))
    # THEN EC2's 50-tag limit holds and the launch succeeds; the keys that did not fit are countable
    assert budget == 11 and len(tags) == 11
    assert result.launched and result.errors == []
    [raw] = instances_by_id(ec2, [result.launched[0].instance_id])
    assert len(raw["Tags"]) == 50
    assert 0 < len(pods_from_tags(tags)) < len(keys)
    # and 20 pod tags on top, as wave 1 sent, is what EC2 refuses
    refused = cloud.launch(_request(node_class=many, tags=pod_tags(keys), capacity_types=("on-demand",)))
    assert not refused.launched and [e.code for e in refused.errors] == ["TagLimitExceeded"]


@pytest.mark.parametrize(("count", "ok"), [(40, True), (41, False)])
def test_node_class_tag_budget_is_checked_at_config_time(count: int, ok: bool) -> None:
    spec = {"tags": {f"k{i}": "v" for i in range(count)}}
    if ok:
        assert pod_tag_budget(node_class(**spec).tags) == 1
        return
    with pytest.raises(ConfigError, match=r"41 tags, but EC2 allows 50 .* remove at least 1"):
        node_class(**spec)


def test_instances_carry_the_drift_hashes(ec2: Any, cloud: AwsCloud) -> None:
    # GIVEN a launch whose NodePool template hashes to "123"
    req = _request(node_pool_hash="123", capacity_types=("on-demand",))
    # WHEN it launches
    result = cloud.launch(req)
    # THEN the instance carries the NodePool's and the EC2NodeClass's hashes (drift compares them later)
    [raw] = instances_by_id(ec2, [result.launched[0].instance_id])
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert tags["karpenter.sh/nodepool-hash"] == "123"
    assert tags["karpenter.k8s.aws/ec2nodeclass-hash"] == node_class_hash(req.node_class)


def test_offerings_are_built_once_until_the_catalog_prices_or_unavailable_offerings_change(
        cloud: AwsCloud, moto_catalog: Any) -> None:
    # Given the offerings a pass builds
    first = cloud.offerings()
    assert first
    # When the next pass asks again with nothing changed / Then it gets the same offerings, not rebuilt,
    # in a list of its own
    again = cloud.offerings()
    assert again == first and all(a is b for a, b in zip(again, first, strict=True))
    again.clear()
    assert cloud.offerings() == first
    # When an offering is marked unavailable / Then they are rebuilt with it unavailable
    spot = next(o for o in first if o.capacity_type == "spot")
    cloud.mark_unavailable(spot.instance_type, spot.zone, "spot")
    marked = {(o.instance_type, o.zone, o.capacity_type): o.available for o in cloud.offerings()}
    assert marked[(spot.instance_type, spot.zone, "spot")] is False
    # When the catalog is loaded again (a refresh) / Then they are rebuilt from it
    cloud.catalog.load(*moto_catalog)
    rebuilt = cloud.offerings()
    assert len(rebuilt) == len(first) and rebuilt[0] is not first[0]
