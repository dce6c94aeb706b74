"""AMI resolution: aliases through the public SSM parameters (per family, version and architecture),
and images by id / name / tags through DescribeImages."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.adapters.aws.ami import AmiResolver, alias_parameter, variant_of
from autoscaler.adapters.clock import ManualClock
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.instance_types import instance_type_from_ec2
from tests.adapters.aws.helpers import builtin_images, node_class, put_public_parameter


@pytest.mark.parametrize(
    ("family", "version", "arch", "want"),
    [
        ("AL2023", "latest", "amd64",
         "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id"),
        ("AL2023", "latest", "arm64",
         "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/recommended/image_id"),
        ("AL2023", "v20240807", "amd64",
         "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/"
         "amazon-eks-node-al2023-x86_64-standard-1.30-v20240807/image_id"),
        ("AL2", "latest", "amd64", "/aws/service/eks/optimized-ami/1.30/amazon-linux-2/recommended/image_id"),
        ("AL2", "latest", "arm64", "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/recommended/image_id"),
        ("AL2", "v20240807", "arm64",
         "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/amazon-eks-arm64-node-1.30-v20240807/image_id"),
        ("Bottlerocket", "latest", "amd64", "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/latest/image_id"),
        ("Bottlerocket", "latest", "arm64", "/aws/service/bottlerocket/aws-k8s-1.30/arm64/latest/image_id"),
        ("Bottlerocket", "v1.20.3", "amd64", "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/1.20.3/image_id"),
    ],
)
def test_alias_parameter_names(family: str, version: str, arch: Any, want: str) -> None:
    assert alias_parameter(family=family, version=version, k8s_version="1.30", arch=arch) == want


@pytest.mark.parametrize(
    ("family", "arch", "variant", "want"),
    [
        ("AL2023", "amd64", "nvidia",
         "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/nvidia/recommended/image_id"),
        ("AL2023", "amd64", "neuron",
         "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/neuron/recommended/image_id"),
        ("AL2", "amd64", "nvidia", "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-gpu/recommended/image_id"),
        ("AL2", "arm64", "nvidia", None),
        ("Bottlerocket", "arm64", "nvidia", "/aws/service/bottlerocket/aws-k8s-1.30-nvidia/arm64/latest/image_id"),
        ("Bottlerocket", "amd64", "neuron", "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/latest/image_id"),
    ],
)
def test_accelerated_alias_parameter_names(family: str, arch: Any, variant: Any, want: str | None) -> None:
    assert alias_parameter(family=family, version="latest", k8s_version="1.30", arch=arch, variant=variant) == want


@pytest.mark.parametrize(
    ("instance_type", "variant"),
    [("m5.large", "standard"), ("g5.xlarge", "nvidia"), ("p4d.24xlarge", "nvidia"), ("inf2.xlarge", "neuron"),
     ("trn1.2xlarge", "neuron"), ("m6g.large", "standard")],
)
def test_instance_type_variant(moto_catalog: Any, instance_type: str, variant: str) -> None:
    infos = {i["InstanceType"]: i for i in moto_catalog[0]}
    it = instance_type_from_ec2(infos[instance_type])
    assert it is not None and variant_of(it) == variant


@pytest.mark.parametrize(
    ("alias", "params"),
    [
        ("al2023@latest", {"amd64": "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/"
                                    "recommended/image_id",
                           "arm64": "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/"
                                    "recommended/image_id"}),
        ("bottlerocket@latest", {"amd64": "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/latest/image_id"}),
        ("bottlerocket@v1.20.3", {"arm64": "/aws/service/bottlerocket/aws-k8s-1.30/arm64/1.20.3/image_id"}),
        ("al2@v20240807", {"arm64": "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/"
                                    "amazon-eks-arm64-node-1.30-v20240807/image_id"}),
    ],
)
def test_alias_resolves_per_architecture_through_ssm(ssm: Any, ec2: Any, alias: str, params: dict[str, str]) -> None:
    for arch, name in params.items():
        put_public_parameter(name, f"ami-{arch}0000000000001")
    resolver = AmiResolver(ssm=ssm, ec2=ec2, k8s_version="1.30", clock=ManualClock())
    amis = resolver.resolve(node_class(amiSelectorTerms=[{"alias": alias}]))
    assert {ami.architecture: ami.image_id for ami in amis.values()} == {a: f"ami-{a}0000000000001" for a in params}
    calls = resolver.calls
    resolver.resolve(node_class(amiSelectorTerms=[{"alias": alias}]))
    assert resolver.calls == calls  # cached


def test_alias_with_no_parameter_is_a_config_error(ssm: Any, ec2: Any) -> None:
    resolver = AmiResolver(ssm=ssm, ec2=ec2, k8s_version="1.99", clock=ManualClock())
    with pytest.raises(ConfigError, match=r"EC2NodeClass default: spec.amiSelectorTerms match no available image"):
        resolver.resolve(node_class())


def test_images_by_id_name_and_tags_newest_per_architecture(ssm: Any, ec2: Any) -> None:
    images = builtin_images(ec2)
    x86, arm = images["amd64"], images["arm64"]
    arm_name = ec2.describe_images(ImageIds=[arm])["Images"][0]["Name"]
    ec2.create_tags(Resources=[x86, arm], Tags=[{"Key": "team", "Value": "nodes"}])
    resolver = AmiResolver(ssm=ssm, ec2=ec2, k8s_version="1.30", clock=ManualClock())

    by_id = resolver.resolve(node_class(amiFamily="AL2023", amiSelectorTerms=[{"id": x86}]))
    assert {i.architecture: i.image_id for i in by_id.values()} == {"amd64": x86}

    by_tags = resolver.resolve(node_class(amiFamily="AL2023", amiSelectorTerms=[{"tags": {"team": "nodes"}}]))
    assert {i.architecture: i.image_id for i in by_tags.values()} == {"amd64": x86, "arm64": arm}

    by_name = resolver.resolve(node_class(amiFamily="AL2023", amiSelectorTerms=[{"name": arm_name}]))
    assert {i.architecture: i.image_id for i in by_name.values()} == {"arm64": arm}

    with pytest.raises(ConfigError, match="match no available image"):
        resolver.resolve(node_class(amiFamily="AL2023", amiSelectorTerms=[{"tags": {"team": "other"}}]))
