"""The ``CloudPort`` contract, run against ``AwsCloud`` on moto (made as strict as EC2 where moto is not: client
tokens, ``simulator/ec2_tokens.py``; moto as a server, since in process its own before-send hook acts on a
request whose answer the token replays) and against the service tests' in-memory fake
(``tests/app/fakes_cloud.FakeCloud``): launches tagged as ours and found until terminated, client-token
idempotency, capacity errors and the 3-minute capacity-error cache, termination that refuses what is not ours,
and node classes that select nothing. The fake may never be more forgiving than the adapter."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.clock import ManualClock
from autoscaler.app.launcher import new_claim_id
from autoscaler.app.ports import CloudError, CloudPort, UncertainOutcomeError
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.fleet import FleetRequest
from autoscaler.domain.keys import NODECLAIM_TAG, NODEPOOL_TAG
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.ownership import OwnershipError
from simulator.ec2_tokens import ClientTokens
from simulator.local import moto_catalog
from tests.adapters.aws.helpers import (
    CLUSTER,
    REGION,
    CapacityFault,
    builtin_images,
    make_network,
    node_class,
    seed_eks_amis,
)
from tests.app.fakes_cloud import FakeCloud
from tests.moto_env import moto_server_environment, running_moto_server

ZONE = "us-east-1a"


@dataclass
class Region:
    """A ``CloudPort``, its clock, and how a test provokes what only EC2 decides."""

    port: CloudPort
    clock: ManualClock
    no_capacity: Callable[[str, str, str], None]  # (type, zone, capacity type): EC2 has none
    lose_next_answer: Callable[[], None]  # the next CreateFleet acts, and its answer is lost
    run_foreign: Callable[[dict[str, str]], str]  # an instance someone else launched, with these tags
    protect: Callable[[str], None]  # turn on an instance's termination protection


def fake_region(cls: type[FakeCloud] = FakeCloud) -> Iterator[Region]:
    """The fake as a Region (``tests/adapters/contract/test_fakes_are_strict.py`` plants forgiving ones)."""
    clock = ManualClock()
    fake = cls(cluster_name=CLUSTER.name, clock=clock)

    def lose() -> None:
        fake.next_create_fleet_error = UncertainOutcomeError("create_fleet: ReadTimeoutError: answer lost",
                                                             operation="create_fleet", code="ReadTimeoutError")
    yield Region(port=fake, clock=clock, no_capacity=lambda t, z, ct: fake.insufficient.add((t, z, ct)),
                 lose_next_answer=lose, run_foreign=lambda tags: fake.run_instance(tags=tags).instance_id,
                 protect=fake.protect)


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    with running_moto_server() as server:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"


def _moto(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> Iterator[Region]:
    moto_server_environment(monkeypatch, endpoint, REGION)
    ec2 = boto3.client("ec2", region_name=REGION)
    network = make_network(ec2)
    seed_eks_amis(ec2)
    tokens = ClientTokens(max_sends=1).install(ec2.meta.events)  # a lost answer is not resent by botocore
    fault = CapacityFault().install(ec2)
    clock = ManualClock()
    cloud = AwsCloud(ec2=ec2, ssm=boto3.client("ssm", region_name=REGION), iam=boto3.client("iam"),
                     pricing=boto3.client("pricing", region_name=REGION), region=REGION, cluster=CLUSTER,
                     clock=clock, catalog_ttl=3600)
    cloud.catalog.load(*moto_catalog(REGION))

    def no_capacity(instance_type: str, zone: str, capacity_type: str) -> None:
        fault.failing[(instance_type, zone)] = "InsufficientInstanceCapacity"
        fault.only_capacity_type = capacity_type

    def run_foreign(tags: dict[str, str]) -> str:
        spec: list[Any] = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
        return str(ec2.run_instances(ImageId=builtin_images(ec2)["amd64"], InstanceType="m5.large", MinCount=1,
                                     MaxCount=1, SubnetId=network.subnets[ZONE],
                                     TagSpecifications=spec)["Instances"][0]["InstanceId"])
    def protect(instance_id: str) -> None:
        ec2.modify_instance_attribute(InstanceId=instance_id, DisableApiTermination={"Value": True})
    yield Region(port=cloud, clock=clock, no_capacity=no_capacity,
                 lose_next_answer=lambda: tokens.lose_responses(1), run_foreign=run_foreign, protect=protect)


@pytest.fixture(params=["fake", "moto"])
def region(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Region]:
    if request.param == "fake":
        yield from fake_region()
    else:
        yield from _moto(monkeypatch, request.getfixturevalue("moto_endpoint"))


def _request(nc: NodeClass | None = None, **kw: Any) -> FleetRequest:
    base: dict[str, Any] = {"claim_id": new_claim_id("general"), "cluster_name": CLUSTER.name, "node_pool": "general",
                            "node_class": nc or node_class(), "capacity_types": ("on-demand",),
                            "instance_types": ("m5.large",), "zones": (ZONE,)}
    return FleetRequest(**{**base, **kw})


def test_a_launch_is_ours_in_flight_and_found_until_terminated(region: Region) -> None:
    request = _request(count=2)
    result = region.port.launch(request)
    assert result.complete and len(result.launched) == 2, result
    assert {(i.instance_type, i.zone, i.capacity_type, i.claim_id) for i in result.launched} == {
        ("m5.large", ZONE, "on-demand", request.claim_id)}
    first, second = sorted(i.instance_id for i in result.launched)
    owned = region.port.owned_instances()
    assert [i.instance_id for i in owned] == [first, second]
    assert {(i.tags[NODECLAIM_TAG], i.tags[NODEPOOL_TAG], i.claim_id) for i in owned} == {
        (request.claim_id, "general", request.claim_id)}
    assert [i.instance_id for i in region.port.in_flight({first})] == [second]
    # Unknown ids are left out, not an error.
    assert sorted(i.instance_id for i in region.port.describe_instances([first, second, "i-0123456789abcdef0"])) == [
        first, second]
    assert sorted(region.port.terminate([first, second])) == [first, second]
    assert region.port.owned_instances() == []
    assert {i.state for i in region.port.describe_instances([first, second])} <= {"shutting-down", "terminated"}
    assert region.port.terminate([first, second]) == []  # already going: skipped


def test_instances_are_found_by_their_claim_tag_and_only_ours_and_live(region: Region) -> None:
    # How a pass finds what a launch whose answer was lost got, without listing every instance.
    mine, other = _request(count=2), _request()
    launched = region.port.launch(mine).launched
    region.port.launch(other)
    foreign = region.run_foreign({NODECLAIM_TAG: mine.claim_id})  # another cluster's instance, same tag value
    found = region.port.claimed_instances({mine.claim_id, "default-nothing"})
    assert sorted(i.instance_id for i in found) == sorted(i.instance_id for i in launched)
    assert foreign not in {i.instance_id for i in found}
    region.port.terminate([launched[0].instance_id])
    assert [i.instance_id for i in region.port.claimed_instances({mine.claim_id})] == [launched[1].instance_id]
    assert region.port.claimed_instances(set()) == []


def test_a_launch_sent_again_with_its_claim_launches_nothing_more(region: Region) -> None:
    request = _request()
    once = region.port.launch(request)
    again = region.port.launch(request)
    assert [i.instance_id for i in again.launched] == [i.instance_id for i in once.launched]
    assert len(region.port.owned_instances()) == 1


def test_a_launch_whose_answer_was_lost_is_uncertain_and_its_retry_answers_what_launched(region: Region) -> None:
    request = _request()
    region.lose_next_answer()
    lost = region.port.launch(request)
    assert lost.uncertain and not lost.launched, lost
    [launched] = region.port.owned_instances()  # EC2 acted on it
    retried = region.port.launch(request)
    assert [i.instance_id for i in retried.launched] == [launched.instance_id]
    assert len(region.port.owned_instances()) == 1


def test_an_offering_without_capacity_is_reported_and_skipped_for_three_minutes(region: Region) -> None:
    region.no_capacity("m5.large", ZONE, "spot")
    result = region.port.launch(_request(capacity_types=("spot",), instance_types=("m5.large", "m5a.large")))
    assert result.complete and [i.instance_type for i in result.launched] == ["m5a.large"], result
    assert [(e.instance_type, e.zone) for e in result.errors if e.is_capacity_error] == [("m5.large", ZONE)]
    assert ("m5.large", ZONE, "spot") in region.port.unavailable()
    region.clock.advance(181)
    assert ("m5.large", ZONE, "spot") not in region.port.unavailable()


def test_an_offering_marked_unavailable_is_not_launched_for_three_minutes(region: Region) -> None:
    region.port.mark_unavailable("m5.large", ZONE, "on-demand")
    refused = region.port.launch(_request())
    assert not refused.launched and [e.code for e in refused.errors] == ["NoOfferingsLeft"], refused
    region.clock.advance(180)
    assert region.port.unavailable() == frozenset()
    assert region.port.launch(_request()).complete


def test_termination_refuses_an_instance_that_is_not_ours_and_terminates_nothing(region: Region) -> None:
    [ours] = region.port.launch(_request()).launched
    node_group = region.run_foreign({f"kubernetes.io/cluster/{CLUSTER.name}": "owned"})
    with pytest.raises(OwnershipError) as refused:
        region.port.terminate([ours.instance_id, node_group])
    assert node_group in str(refused.value)
    assert [i.instance_id for i in region.port.owned_instances()] == [ours.instance_id]
    assert {i.state for i in region.port.describe_instances([node_group])} <= {"pending", "running"}


def test_a_node_class_that_selects_no_subnet_is_a_config_error(region: Region) -> None:
    nowhere = node_class("nowhere", subnetSelectorTerms=[{"tags": {"karpenter.sh/discovery": "nowhere"}}])
    assert region.port.subnet_zones(node_class()) >= {ZONE}
    with pytest.raises(ConfigError, match="subnetSelectorTerms"):
        region.port.subnet_zones(nowhere)
    with pytest.raises(ConfigError, match="subnetSelectorTerms"):
        region.port.resolve_node_class(nowhere)
    with pytest.raises(ConfigError, match="subnetSelectorTerms"):
        region.port.launch(_request(nowhere))
    assert region.port.owned_instances() == []


def test_termination_of_a_protected_instance_is_refused(region: Region) -> None:
    # One instance per call, as the product terminates: EC2 keeps the other instances of a refused call that
    # share the protected one's zone, which moto does not (it terminates them).
    launched = region.port.launch(_request(count=2)).launched
    protected, plain = sorted(i.instance_id for i in launched)
    region.protect(protected)
    with pytest.raises(CloudError) as refused:
        region.port.terminate([protected])
    assert refused.value.code == "OperationNotPermitted"
    assert [i.instance_id for i in region.port.owned_instances()] == [protected, plain]
    assert region.port.terminate([plain]) == [plain]
    assert [i.instance_id for i in region.port.owned_instances()] == [protected]


def test_karpenter_instances_are_those_karpenter_launched_for_this_cluster(region: Region) -> None:
    region.port.launch(_request())  # ours
    cluster_tag = f"kubernetes.io/cluster/{CLUSTER.name}"
    karpenter = region.run_foreign({"karpenter.sh/nodepool": "default", cluster_tag: "owned"})
    v0 = region.run_foreign({"karpenter.sh/provisioner-name": "default", "eks:eks-cluster-name": CLUSTER.name})
    region.run_foreign({"karpenter.sh/nodepool": "default", "kubernetes.io/cluster/staging": "owned"})
    region.run_foreign({cluster_tag: "owned"})  # a managed node group's
    assert [i.instance_id for i in region.port.karpenter_instances()] == sorted([karpenter, v0])
