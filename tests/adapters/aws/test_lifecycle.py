"""What the node lifecycle needs of ``AwsCloud`` on moto: listing and deleting this cluster's launch templates,
mark_unavailable, and the launch tags on an instance. The lifecycle sweep's own rules run on the port fakes
(``tests/app/test_lifecycle.py``)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.domain.ownership import launch_tags, ownership_tags
from tests.adapters.aws.helpers import CLUSTER, REGION, Network, builtin_images, tags_of


@pytest.fixture
def cloud(aws: None, moto_catalog: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> AwsCloud:
    c = AwsCloud(ec2=boto3.client("ec2", region_name=REGION), ssm=boto3.client("ssm", region_name=REGION),
                 pricing=boto3.client("pricing", region_name="us-east-1"), iam=boto3.client("iam"),
                 region=REGION, cluster=CLUSTER)
    c.catalog.load(*moto_catalog)
    return c


def launch(ec2: Any, network: Network, *, owned: bool = True, spot: bool = True) -> dict[str, Any]:
    image = builtin_images(ec2)["amd64"]
    tags = launch_tags(cluster_name=CLUSTER.name, node_pool="default", node_class="default", claim_id="default-abc")
    if not owned:
        tags = {"Name": "someone-else"}
    extra: dict[str, Any] = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    inst = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.xlarge",
                             SubnetId=network.subnets["us-east-1a"], **extra,
                             TagSpecifications=[{"ResourceType": "instance",
                                                 "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}])
    return dict(inst["Instances"][0])


def _template(ec2: Any, name: str, *, owned: bool = True) -> str:
    tags = ownership_tags(CLUSTER.name) if owned else {"team": "x"}
    return str(ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-12345678"},
        TagSpecifications=[{"ResourceType": "launch-template",
                            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )["LaunchTemplate"]["LaunchTemplateId"])


def test_launch_templates_lists_only_ours_and_deletes(ec2: Any, cloud: AwsCloud) -> None:
    ours = _template(ec2, f"eks-autoscaler/{CLUSTER.name}/abc")
    _template(ec2, "eks-autoscaler/other-cluster/abc", owned=False)
    _template(ec2, "hand-made", owned=True)
    listed = cloud.launch_templates()
    assert [t.template_id for t in listed] == [ours] and listed[0].created_at > 0
    assert cloud.delete_launch_template(ours) is True
    assert cloud.delete_launch_template(ours) is False
    assert cloud.launch_templates() == []


def test_mark_unavailable(cloud: AwsCloud) -> None:
    cloud.mark_unavailable("m5.large", "us-east-1b", "spot")
    assert cloud.unavailable() == {("m5.large", "us-east-1b", "spot")}
    assert cloud.fleet.unavailable.is_unavailable("m5.large", "us-east-1b", "spot")
    assert not cloud.fleet.unavailable.is_unavailable("m5.large", "us-east-1a", "spot")


def test_instances_carry_the_launch_tags(ec2: Any, network: Network) -> None:
    inst = launch(ec2, network)
    assert tags_of(inst)["karpenter.sh/nodeclaim"] == "default-abc"
