"""The instance profile a launch uses is the one the stack made or the cluster file names
(``nodeRole.instanceProfileName`` / ``AUTOSCALER_INSTANCE_PROFILE``): CreateFleet's launch template carries
it and nothing is created in IAM at run time."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.clock import ManualClock
from autoscaler.app.launcher import new_claim_id
from autoscaler.config import ClusterConfig
from autoscaler.domain.fleet import FleetRequest
from autoscaler.handlers.runtime import ENV_KUBE_ENDPOINT, build_runtime
from tests.adapters.aws.conftest import REGION
from tests.adapters.aws.helpers import CLUSTER, Network, node_class, seed_eks_amis

PROFILE = "KarpenterNodeInstanceProfile-prod"


def _launch_template_profiles(ec2: Any) -> list[str]:
    """The instance profile of every launch template version (the launch made exactly one)."""
    out = []
    for lt in ec2.describe_launch_templates()["LaunchTemplates"]:
        for version in ec2.describe_launch_template_versions(LaunchTemplateId=lt["LaunchTemplateId"])[
                "LaunchTemplateVersions"]:
            out.append(str(version["LaunchTemplateData"]["IamInstanceProfile"]["Name"]))
    return out


def test_createfleet_uses_the_configured_instance_profile(ec2: Any, ssm: Any, iam: Any, network: Network,
                                                          moto_catalog: Any) -> None:
    # Given the profile the stack made for the node role, and an EC2NodeClass that names the role
    seed_eks_amis(ec2)
    cloud = AwsCloud(ec2=ec2, ssm=ssm, iam=iam, pricing=boto3.client("pricing", region_name=REGION), region=REGION,
                     cluster=CLUSTER, clock=ManualClock(), catalog_ttl=3600, instance_profile=PROFILE)
    cloud.catalog.load(*moto_catalog)
    request = FleetRequest(claim_id=new_claim_id("general"), cluster_name=CLUSTER.name, node_pool="general",
                           node_class=node_class(role="KarpenterNodeRole-prod", instanceProfile=None),
                           capacity_types=("on-demand",), instance_types=("m5.large",), zones=("us-east-1a",))
    # When a node is launched
    result = cloud.launch(request)
    # Then CreateFleet's launch template carries that profile, and no profile was created at run time
    assert result.launched, result.errors
    assert _launch_template_profiles(ec2) == [PROFILE]
    assert iam.list_instance_profiles()["InstanceProfiles"] == []
    assert not any(op.endswith("instance_profile") for op in cloud.calls)


@pytest.mark.parametrize(("environ", "file_setting", "expected"), [
    ({"AUTOSCALER_INSTANCE_PROFILE": "StackProfile"}, None, "StackProfile"),  # the deployed stack's output
    ({}, "FromTheClusterFile", "FromTheClusterFile"),  # local runs: nodeRole.instanceProfileName
    ({"AUTOSCALER_INSTANCE_PROFILE": "StackProfile"}, "FromTheClusterFile", "StackProfile"),
])
def test_the_runtime_passes_the_profile_on(aws: None, environ: dict[str, str], file_setting: str | None,
                                           expected: str) -> None:
    # Given a cluster file (with or without nodeRole.instanceProfileName) and the functions' environment
    config = ClusterConfig.model_validate({
        "clusterName": "prod", "region": REGION, "nodePools": [{}], "nodeClasses": [{}],
        "nodeRole": {"instanceProfileName": file_setting} if file_setting else {}})
    # When the runtime is built; Then an EC2NodeClass naming the role launches with that profile
    rt = build_runtime(config=config.model_copy(update={"node_pools": [], "node_classes": []}),
                       environ={ENV_KUBE_ENDPOINT: "http://127.0.0.1:9", **environ},
                       session=boto3.Session(region_name=REGION))
    assert rt.cloud.profiles.for_node_class(node_class(role="r", instanceProfile=None)) == expected
