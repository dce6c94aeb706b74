"""Owned / in-flight instances found by tag, and termination that refuses what this cluster does not own."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.adapters.aws.instances import Instances
from autoscaler.domain.ownership import OwnershipError, is_owned, launch_tags, ownership_problem
from tests.adapters.aws.helpers import Network, builtin_images


def _run(ec2: Any, network: Network, tags: dict[str, str]) -> str:
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    return str(ec2.run_instances(ImageId=builtin_images(ec2)["amd64"], InstanceType="m5.large", MinCount=1,
                                 MaxCount=1, SubnetId=network.subnets["us-east-1a"],
                                 TagSpecifications=spec)["Instances"][0]["InstanceId"])


def _ours(cluster: str = "prod", claim: str = "general-abc") -> dict[str, str]:
    return launch_tags(cluster_name=cluster, node_pool="general", node_class="default", claim_id=claim)


@pytest.mark.parametrize(
    ("tags", "owned"),
    [
        (_ours(), True),
        (_ours(cluster="staging"), False),
        ({k: v for k, v in _ours().items() if k != "eks-serverless-autoscaler/managed-by"}, False),
        ({"kubernetes.io/cluster/prod": "owned"}, False),  # e.g. a managed node group's instance
        ({}, False),
    ],
)
def test_ownership_rule(tags: dict[str, str], owned: bool) -> None:
    assert is_owned(tags, "prod") is owned
    assert (ownership_problem(tags, "prod") is None) is owned


def test_owned_and_in_flight_by_tags(ec2: Any, network: Network) -> None:
    mine = _run(ec2, network, _ours(claim="general-1"))
    registered = _run(ec2, network, _ours(claim="general-2"))
    _run(ec2, network, _ours(cluster="staging"))
    _run(ec2, network, {})
    gone = _run(ec2, network, _ours(claim="general-3"))
    ec2.terminate_instances(InstanceIds=[gone])

    instances = Instances(ec2, cluster_name="prod")
    owned = instances.owned()
    assert {i.instance_id for i in owned} == {mine, registered}
    [first] = [i for i in owned if i.instance_id == mine]
    assert (first.node_pool, first.claim_id, first.zone, first.instance_type) == (
        "general", "general-1", "us-east-1a", "m5.large")
    assert first.provider_id == f"aws:///us-east-1a/{mine}"
    assert first.raw["InstanceId"] == mine  # the snapshot's inFlight shape
    # only what the product reads is kept of each listed instance (memory at 10,000 instances)
    assert first.image_id and first.subnet_id and first.security_groups is not None
    assert "NetworkInterfaces" not in first.raw and "BlockDeviceMappings" not in first.raw
    assert [i.instance_id for i in instances.in_flight({registered})] == [mine]


def test_terminate_refuses_instances_without_this_clusters_tags(ec2: Any, network: Network) -> None:
    mine = _run(ec2, network, _ours())
    foreign = _run(ec2, network, _ours(cluster="staging"))
    untagged = _run(ec2, network, {})
    instances = Instances(ec2, cluster_name="prod")

    for other in (foreign, untagged):
        with pytest.raises(OwnershipError, match=other) as exc:
            instances.terminate([mine, other])
        assert exc.value.instance_id == other
    states = {i.instance_id: i.state for i in instances.describe([mine, foreign, untagged])}
    assert states == {mine: "running", foreign: "running", untagged: "running"}  # nothing was terminated

    assert instances.terminate([mine, "i-00000000000000000"]) == [mine]  # unknown ids are skipped
    assert instances.describe([mine])[0].state in ("shutting-down", "terminated")


def test_the_fields_kept_of_a_listed_instance_are_all_the_product_reads() -> None:
    # Given an instance as DescribeInstances answers it, with every field the product could read
    from autoscaler.adapters.aws.instances import KEPT_FIELDS
    from autoscaler.domain.fleet import instance_from_ec2

    full = {"InstanceId": "i-1", "InstanceType": "m5.xlarge", "Placement": {"AvailabilityZone": "us-east-1a"},
            "State": {"Name": "running"}, "InstanceLifecycle": "spot", "LaunchTime": "2026-01-01T00:00:00Z",
            "Tags": [{"Key": "karpenter.sh/nodepool", "Value": "default"}], "PrivateDnsName": "ip-10-0-0-1",
            "PrivateIpAddress": "10.0.0.1", "ImageId": "ami-1", "SubnetId": "subnet-1", "VpcId": "vpc-1",
            "SecurityGroups": [{"GroupId": "sg-1", "GroupName": "x"}], "Architecture": "x86_64",
            "CapacityReservationId": "cr-1", "NetworkInterfaces": [{"x": 1}], "BlockDeviceMappings": [{"y": 2}]}
    # When only the kept fields are read
    kept = instance_from_ec2({k: full[k] for k in KEPT_FIELDS if k in full})
    # Then the product sees the same instance (a field dropped by mistake, e.g. the reservation id that
    # makes an instance "reserved", would change it)
    whole = instance_from_ec2(full)
    for attr in ("instance_id", "instance_type", "zone", "state", "capacity_type", "launch_time", "tags",
                 "image_id", "subnet_id", "security_groups", "reservation_id"):
        assert getattr(kept, attr) == getattr(whole, attr), attr


def test_instances_are_read_in_pages_of_1000_instances_as_ec2_pages_them(ec2: Any, network: Network) -> None:
    """GIVEN moto paging DescribeInstances by instance as EC2 does (at most 1,000 a page; moto itself pages by
    reservation, so one launch of 1,100 instances would be one page)
    WHEN the owned instances are listed
    THEN every instance comes back over two pages, and a page size EC2 refuses is refused."""
    from simulator.moto_strict import page_instances_by_instance

    undo = page_instances_by_instance()
    try:
        tags = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in _ours().items()]}]
        launched = ec2.run_instances(ImageId=builtin_images(ec2)["amd64"], InstanceType="m5.large", MinCount=1100,
                                     MaxCount=1100, SubnetId=network.subnets["us-east-1a"], TagSpecifications=tags)
        _run(ec2, network, _ours(claim="general-2"))  # a second reservation
        instances = Instances(ec2, cluster_name="prod")
        owned = instances.owned()
        assert len(owned) == 1101 == len({i.instance_id for i in owned})
        assert instances.calls["describe_instances"] == 2
        assert {i["InstanceId"] for i in launched["Instances"]} <= {i.instance_id for i in owned}
        with pytest.raises(ec2.exceptions.ClientError, match="MaxResults"):
            ec2.describe_instances(MaxResults=1001)
        page = ec2.describe_instances(MaxResults=5)
        assert sum(len(r["Instances"]) for r in page["Reservations"]) == 5 and page["NextToken"]
    finally:
        undo()
