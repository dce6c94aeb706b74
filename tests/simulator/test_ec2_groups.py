"""simulator/ec2_groups.py under the provisioner's parallel launches: each CreateFleet's instances get the
security groups of *their* launch template, even when another call runs in between (no state shared by
the launch threads)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from simulator.ec2_groups import install_launch_template_groups


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def _template(ec2: Any, vpc: str, name: str) -> tuple[str, str]:
    group = ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc)["GroupId"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    template = ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={
        "ImageId": image, "SecurityGroupIds": [group]})["LaunchTemplate"]["LaunchTemplateId"]
    return template, group


def _fleet(ec2: Any, template: str, subnet: str) -> list[str]:
    answer = ec2.create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Latest"},
                                "Overrides": [{"InstanceType": "m5.large", "SubnetId": subnet}]}])
    return [i for fleet in answer["Instances"] for i in fleet["InstanceIds"]]


def test_interleaved_launches_keep_their_own_templates_groups(ec2: Any) -> None:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    (first, first_group), (second, second_group) = _template(ec2, vpc, "a"), _template(ec2, vpc, "b")
    install_launch_template_groups(ec2.meta.events, lambda: ec2)
    # The first call is held after its parameters are built until the second call has finished entirely
    second_done, held = threading.Event(), threading.local()

    def hold(params: dict[str, Any], **_: Any) -> None:
        if getattr(held, "hold", False):
            second_done.wait(timeout=30)

    ec2.meta.events.register("before-call.ec2.CreateFleet", hold)
    out: dict[str, list[str]] = {}

    def launch_first() -> None:
        held.hold = True
        out["first"] = _fleet(ec2, first, subnet)

    worker = threading.Thread(target=launch_first)
    worker.start()
    out["second"] = _fleet(ec2, second, subnet)
    second_done.set()
    worker.join(timeout=60)

    def groups(ids: list[str]) -> set[str]:
        reservations = ec2.describe_instances(InstanceIds=ids)["Reservations"]
        return {g["GroupId"] for r in reservations for i in r["Instances"] for g in i["SecurityGroups"]}

    assert groups(out["first"]) == {first_group}
    assert groups(out["second"]) == {second_group}
