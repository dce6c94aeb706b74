"""Launch templates reused by content hash, and the user data of each AMI family decoded and checked."""

from __future__ import annotations

import base64
import email
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from autoscaler.adapters.aws._calls import TtlCache
from autoscaler.adapters.aws.ami import Ami
from autoscaler.adapters.aws.launch_template import InstanceProfiles, LaunchTemplates, launch_template_data
from autoscaler.adapters.aws.userdata import NODECONFIG_CONTENT_TYPE, NodeJoin
from autoscaler.adapters.clock import SystemClock
from autoscaler.domain.models import UNREGISTERED_TAINT, Taint
from autoscaler.domain.nodeclass import KubeletConfiguration
from autoscaler.domain.ownership import is_owned
from tests.adapters.aws.helpers import CLUSTER, node_class, tags_of

AMI = Ami(image_id="ami-0123456789abcdef0", architecture="amd64")
JOIN = NodeJoin(
    labels={"karpenter.sh/nodepool": "general", "team": "payments"},
    taints=(Taint(key="dedicated", value="payments", effect="NoSchedule"), UNREGISTERED_TAINT),
    kubelet=KubeletConfiguration(max_pods=58),
)


def _data(family_alias: str = "al2023@latest", join: NodeJoin = JOIN, **spec: Any) -> dict[str, Any]:
    nc = node_class(amiSelectorTerms=[{"alias": family_alias}], **spec)
    return launch_template_data(node_class=nc, ami=AMI, cluster=CLUSTER, join=join,
                                security_group_ids=["sg-1"], instance_profile="NodeProfile")


def _user_data(data: dict[str, Any]) -> str:
    return base64.b64decode(data["UserData"]).decode()


def _mime_parts(text: str) -> list[tuple[str, str]]:
    msg = email.message_from_string(text)
    assert msg.is_multipart()
    return [(p.get_content_type(), p.get_payload(decode=True).decode()) for p in msg.get_payload()]


def test_al2023_nodeconfig_in_mime_after_the_users_own_script() -> None:
    data = _data(userData="#!/bin/bash\necho hello-from-user\n")
    parts = _mime_parts(_user_data(data))
    assert [c for c, _ in parts] == ["text/x-shellscript", NODECONFIG_CONTENT_TYPE]
    assert "hello-from-user" in parts[0][1]
    cfg = yaml.safe_load(parts[1][1])
    assert cfg["kind"] == "NodeConfig"
    cluster = cfg["spec"]["cluster"]
    assert (cluster["name"], cluster["apiServerEndpoint"], cluster["certificateAuthority"], cluster["cidr"]) == (
        CLUSTER.name, CLUSTER.endpoint, CLUSTER.certificate_authority, CLUSTER.service_cidr)
    flags = cfg["spec"]["kubelet"]["flags"]
    assert "--node-labels=karpenter.sh/nodepool=general,team=payments" in flags
    assert "--register-with-taints=dedicated=payments:NoSchedule,karpenter.sh/unregistered:NoExecute" in flags
    assert cfg["spec"]["kubelet"]["config"]["maxPods"] == 58


def test_al2023_merges_a_users_mime_nodeconfig() -> None:
    user = (
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n--B\n'
        'Content-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n'
        'spec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n--B--\n'
    )
    parts = _mime_parts(_user_data(_data(userData=user)))
    assert [c for c, _ in parts] == [NODECONFIG_CONTENT_TYPE, NODECONFIG_CONTENT_TYPE]
    assert "shutdownGracePeriod" in parts[0][1]
    assert yaml.safe_load(parts[1][1])["spec"]["cluster"]["name"] == CLUSTER.name


def test_bottlerocket_toml_settings_merged_with_the_users() -> None:
    data = _data("bottlerocket@latest", userData='[settings.host-containers.admin]\nenabled = true\n')
    doc = tomllib.loads(_user_data(data))
    k8s = doc["settings"]["kubernetes"]
    assert (k8s["cluster-name"], k8s["api-server"], k8s["cluster-certificate"]) == (
        CLUSTER.name, CLUSTER.endpoint, CLUSTER.certificate_authority)
    assert k8s["cluster-dns-ip"] == "172.20.0.10"
    assert k8s["max-pods"] == 58
    assert k8s["node-labels"] == {"karpenter.sh/nodepool": "general", "team": "payments"}
    assert k8s["node-taints"] == {"dedicated": ["payments:NoSchedule"], "karpenter.sh/unregistered": [":NoExecute"]}
    assert doc["settings"]["host-containers"]["admin"]["enabled"] is True
    # Bottlerocket's own layout: small OS volume + data volume.
    assert [b["DeviceName"] for b in data["BlockDeviceMappings"]] == ["/dev/xvda", "/dev/xvdb"]


def test_al2_bootstrap_script() -> None:
    parts = _mime_parts(_user_data(_data("al2@latest")))
    script = parts[-1][1]
    assert parts[-1][0] == "text/x-shellscript"
    assert f"/etc/eks/bootstrap.sh {CLUSTER.name} --apiserver-endpoint {CLUSTER.endpoint}" in script
    assert f"--b64-cluster-ca {CLUSTER.certificate_authority}" in script
    assert "--dns-cluster-ip 172.20.0.10" in script
    assert "--node-labels=karpenter.sh/nodepool=general,team=payments" in script
    assert "--register-with-taints=dedicated=payments:NoSchedule,karpenter.sh/unregistered:NoExecute" in script
    assert "--max-pods=58" in script and "--use-max-pods false" in script

    # Without maxPods bootstrap.sh keeps its per-instance-type ENI default.
    plain = _mime_parts(_user_data(_data("al2@latest", join=NodeJoin(labels={}, taints=(UNREGISTERED_TAINT,)))))
    assert "--use-max-pods" not in plain[-1][1] and "--max-pods" not in plain[-1][1]


def test_template_data_defaults_imdsv2_and_block_devices() -> None:
    data = _data()
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert data["BlockDeviceMappings"] == [{"DeviceName": "/dev/xvda", "Ebs": {
        "VolumeSize": 20, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}}]
    custom = _data(blockDeviceMappings=[{"deviceName": "/dev/xvda", "rootVolume": True,
                                         "ebs": {"volumeSize": "100Gi", "volumeType": "io2", "iops": 4000}}],
                   metadataOptions={"httpPutResponseHopLimit": 2})
    assert custom["BlockDeviceMappings"] == [{"DeviceName": "/dev/xvda",
                                              "Ebs": {"VolumeSize": 100, "VolumeType": "io2", "Iops": 4000}}]
    assert custom["MetadataOptions"]["HttpPutResponseHopLimit"] == 2


def test_launch_templates_are_reused_by_content_hash(ec2: Any) -> None:
    nc = node_class(tags={"cost-center": "42"})
    templates = LaunchTemplates(ec2, cluster=CLUSTER)
    data = _data(tags={"cost-center": "42"})
    first = templates.ensure(data, node_class=nc, architecture="amd64")
    assert first.created and first.name.startswith("eks-autoscaler/prod/")
    again = templates.ensure(_data(tags={"cost-center": "42"}), node_class=nc, architecture="amd64")
    assert again.template_id == first.template_id and not again.created
    assert templates.calls.get("create_launch_template") == 1

    # A fresh container finds the existing template by name instead of creating another.
    cold = LaunchTemplates(ec2, cluster=CLUSTER).ensure(data, node_class=nc, architecture="amd64")
    assert cold.template_id == first.template_id and not cold.created

    other = templates.ensure(_data(join=NodeJoin(labels=JOIN.labels, taints=(UNREGISTERED_TAINT,))),
                             node_class=nc, architecture="amd64")
    assert other.template_id != first.template_id
    listed = ec2.describe_launch_templates()["LaunchTemplates"]
    assert len(listed) == 2
    lt_tags = tags_of(listed[0])
    assert is_owned(lt_tags, "prod") and lt_tags["cost-center"] == "42"
    stored = ec2.describe_launch_template_versions(LaunchTemplateId=first.template_id)["LaunchTemplateVersions"]
    assert stored[0]["LaunchTemplateData"]["ImageId"] == AMI.image_id


def test_a_listing_of_the_clusters_templates_spares_each_launch_its_describe(ec2: Any) -> None:
    # GIVEN a template another container created, and a cold container that has listed the cluster's templates
    nc = node_class()
    existing = LaunchTemplates(ec2, cluster=CLUSTER).ensure(_data(), node_class=nc, architecture="amd64")
    templates = LaunchTemplates(ec2, cluster=CLUSTER)
    templates.list_known()
    templates.list_known()  # within the listing's TTL: no second call
    assert templates.calls == {"describe_launch_templates": 1}
    # WHEN launches need that template and a new one
    found = templates.ensure(_data(), node_class=nc, architecture="amd64")
    new = templates.ensure(_data(join=NodeJoin(labels=JOIN.labels, taints=(UNREGISTERED_TAINT,))),
                           node_class=nc, architecture="amd64")
    # THEN the listed one is used as listed and the new one is created without a describe first
    assert found.template_id == existing.template_id and not found.created and new.created
    assert templates.calls == {"describe_launch_templates": 1, "create_launch_template": 1}


def test_a_template_created_after_the_listing_is_used_not_duplicated(ec2: Any) -> None:
    # GIVEN a container that listed the cluster's templates before another container created one
    nc = node_class()
    templates = LaunchTemplates(ec2, cluster=CLUSTER)
    templates.list_known()
    theirs = LaunchTemplates(ec2, cluster=CLUSTER).ensure(_data(), node_class=nc, architecture="amd64")
    # WHEN this container needs the same content: its create meets AlreadyExists
    mine = templates.ensure(_data(), node_class=nc, architecture="amd64")
    # THEN it uses theirs, and EC2 holds one template
    assert mine.template_id == theirs.template_id and not mine.created
    assert len(ec2.describe_launch_templates()["LaunchTemplates"]) == 1


@pytest.mark.parametrize("given", ["KarpenterNodeRole", "arn:aws:iam::123456789012:role/KarpenterNodeRole"])
def test_instance_profile_created_for_a_role_once(iam: Any, given: str) -> None:
    iam.create_role(RoleName="KarpenterNodeRole", AssumeRolePolicyDocument="{}")
    profiles = InstanceProfiles(iam, cluster_name="prod")
    nc = node_class(role=given, instanceProfile=None)
    name = profiles.for_node_class(nc)
    assert name.startswith("prod_")
    roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
    assert [r["RoleName"] for r in roles] == ["KarpenterNodeRole"]
    assert InstanceProfiles(iam, cluster_name="prod").for_node_class(nc) == name  # found, not re-created
    assert profiles.for_node_class(node_class()) == "KarpenterNodeInstanceProfile"


def test_parallel_launches_with_one_content_find_or_create_its_template_once(ec2: Any) -> None:
    # GIVEN a cold container and 12 launch groups that need the same template at the same moment
    # (EC2 is slowed so that every thread is inside ensure() together)
    ec2.meta.events.register("before-send.ec2.DescribeLaunchTemplates", lambda **_: time.sleep(0.05))
    nc = node_class()
    templates = LaunchTemplates(ec2, cluster=CLUSTER)
    with ThreadPoolExecutor(max_workers=12) as pool:
        refs = list(pool.map(lambda _: templates.ensure(_data(), node_class=nc, architecture="amd64"), range(12)))
    # THEN one describe and one create, and every group launches with that template
    assert len({r.template_id for r in refs}) == 1 and sum(r.created for r in refs) == 1
    assert templates.calls.get("create_launch_template") == 1 and templates.calls.get("describe_launch_templates") == 1


def test_a_cache_loads_once_for_threads_asking_together_and_not_after_a_failure() -> None:
    cache: TtlCache[int] = TtlCache(clock=SystemClock(), ttl=60)
    loads: list[int] = []

    def load() -> int:
        time.sleep(0.05)
        loads.append(1)
        return 7

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert set(pool.map(lambda _: cache.get_or_load("k", load), range(8))) == {7}
    assert len(loads) == 1

    def fail() -> int:
        raise RuntimeError("EC2 unavailable")

    with pytest.raises(RuntimeError):
        cache.get_or_load("other", fail)
    assert cache.get_or_load("other", load) == 7 and len(loads) == 2
