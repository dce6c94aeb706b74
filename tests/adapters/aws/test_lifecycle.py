"""Node lifecycle rules (registration timeout, registration, orphaned nodes, unused launch templates)
against moto in-process and the Kubernetes API emulator, plus the launch-template listing/deletion
and mark_unavailable the lifecycle adds to AwsCloud."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.lifecycle import reconcile
from autoscaler.domain.models import UNREGISTERED_TAINT
from autoscaler.domain.nodepool import parse_node_pools
from autoscaler.domain.ownership import launch_tags, ownership_tags
from simulator.kube_api import KubeApiServer, client_for
from tests.adapters.aws.helpers import CLUSTER, REGION, Network, builtin_images, tags_of

POOLS = {p.name: p for p in parse_node_pools([{
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
    "spec": {"template": {"metadata": {"labels": {"intent": "apps"}},
                          "spec": {"nodeClassRef": {"name": "default"}, "requirements": []}}},
}])}
HOUR = 3600.0


@pytest.fixture
def cloud(aws: None, moto_catalog: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> AwsCloud:
    c = AwsCloud(ec2=boto3.client("ec2", region_name=REGION), ssm=boto3.client("ssm", region_name=REGION),
                 pricing=boto3.client("pricing", region_name="us-east-1"), iam=boto3.client("iam"),
                 region=REGION, cluster=CLUSTER)
    c.catalog.load(*moto_catalog)
    return c


@pytest.fixture
def kube(kube_api: KubeApiServer) -> KubeCluster:
    return KubeCluster(client_for(kube_api.url))


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


def node_for(inst: dict[str, Any], *, name: str = "n1", ours: bool = True,
             taint: bool = True) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "m5.xlarge",
              "topology.kubernetes.io/zone": "us-east-1a"}
    if ours:
        labels["karpenter.sh/nodepool"] = "default"
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"aws:///us-east-1a/{inst['InstanceId']}",
                     "taints": [{"key": UNREGISTERED_TAINT.key, "effect": "NoExecute"}] if taint else []},
            "status": {"allocatable": {"cpu": "4", "memory": "15Gi", "pods": "58"}}}


def sweep(kube: KubeCluster, cloud: AwsCloud, *, now: float, dry_run: bool = False) -> Any:
    return reconcile(cluster=kube, cloud=cloud, nodes=kube.nodes(), owned=cloud.owned_instances(),
                     node_pools=POOLS, now=now, dry_run=dry_run)


@pytest.mark.parametrize(("age_minutes", "terminated"), [(5, False), (14.9, False), (15, True), (60, True)])
def test_registration_timeout(ec2: Any, *, network: Network, cloud: AwsCloud, kube: KubeCluster,
                              age_minutes: float, terminated: bool) -> None:
    inst = launch(ec2, network)
    launched = cloud.owned_instances()[0].launch_time
    result = sweep(kube, cloud, now=launched + age_minutes * 60)
    assert (result.timed_out == [inst["InstanceId"]]) is terminated
    assert (("m5.xlarge", "us-east-1a", "spot") in cloud.unavailable()) is terminated
    state = ec2.describe_instances(InstanceIds=[inst["InstanceId"]])["Reservations"][0]["Instances"][0]["State"]
    assert (state["Name"] in ("shutting-down", "terminated")) is terminated


def test_registered_instance_is_never_timed_out(ec2: Any, network: Network, cloud: AwsCloud,
                                                kube_api: KubeApiServer, kube: KubeCluster) -> None:
    inst = launch(ec2, network)
    kube_api.store.create("nodes", node_for(inst))
    assert sweep(kube, cloud, now=cloud.owned_instances()[0].launch_time + HOUR).timed_out == []


def test_registered_node_gets_labels_then_loses_the_unregistered_taint(
        ec2: Any, network: Network, cloud: AwsCloud, kube_api: KubeApiServer, kube: KubeCluster) -> None:
    inst = launch(ec2, network)
    kube_api.store.create("nodes", node_for(inst))
    result = sweep(kube, cloud, now=cloud.owned_instances()[0].launch_time + 60)
    node = kube_api.store.get("nodes", None, "n1")
    assert result.untainted == ["n1"] and not node["spec"].get("taints")
    labels = node["metadata"]["labels"]
    assert labels["intent"] == "apps" and labels["karpenter.sh/capacity-type"] == "spot"
    assert labels["karpenter.k8s.aws/instance-family"] == "m5" and labels["karpenter.sh/nodepool"] == "default"
    # Idempotent: a second sweep changes nothing.
    assert not sweep(kube, cloud, now=cloud.owned_instances()[0].launch_time + 60).changed


@pytest.mark.parametrize(("ours", "terminate", "deleted"), [
    (True, True, True),    # our node, instance gone: delete the Node object
    (True, False, False),  # our node, instance running: keep
    (False, True, False),  # not ours (no NodePool label, not our instance): never touched
])
def test_node_whose_instance_is_gone(ec2: Any, *, network: Network, cloud: AwsCloud, kube_api: KubeApiServer,
                                     kube: KubeCluster, ours: bool, terminate: bool, deleted: bool) -> None:
    inst = launch(ec2, network, owned=ours)
    kube_api.store.create("nodes", node_for(inst, ours=ours, taint=False))
    if terminate:
        ec2.terminate_instances(InstanceIds=[inst["InstanceId"]])
    result = sweep(kube, cloud, now=cloud.clock.now())
    assert (result.deleted_nodes == ["n1"]) is deleted
    assert kube_api.store.exists("nodes", None, "n1") is not deleted


def test_an_adopted_karpenter_node_whose_instance_is_gone_is_deleted_despite_its_finalizer(
        ec2: Any, network: Network, cloud: AwsCloud, kube_api: KubeApiServer, kube: KubeCluster) -> None:
    # Given a Karpenter node (its NodePool label and termination finalizer) whose instance EC2 took
    inst = launch(ec2, network, owned=False)
    body = node_for(inst, taint=False)
    body["metadata"]["finalizers"] = ["karpenter.sh/termination"]
    kube_api.store.create("nodes", body)
    ec2.terminate_instances(InstanceIds=[inst["InstanceId"]])
    # When the lifecycle sweep runs with adoption on (the provisioner passes Karpenter's finalizer)
    result = reconcile(cluster=kube, cloud=cloud, nodes=kube.nodes(), owned=cloud.owned_instances(),
                       node_pools=POOLS, now=cloud.clock.now(), release_finalizers=("karpenter.sh/termination",))
    # Then the Node is really gone, not left pending forever on a finalizer nobody removes
    assert result.deleted_nodes == ["n1"] and not kube_api.store.exists("nodes", None, "n1")


def test_node_with_unknown_instance_id_is_deleted(cloud: AwsCloud, kube_api: KubeApiServer,
                                                  kube: KubeCluster) -> None:
    kube_api.store.create("nodes", node_for({"InstanceId": "i-0123456789abcdef0"}, taint=False))
    assert sweep(kube, cloud, now=cloud.clock.now()).deleted_nodes == ["n1"]


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


@pytest.mark.parametrize(("age", "used_ago", "deleted"), [
    (2 * HOUR, None, True),     # old and not used by this container: delete
    (10 * 60, None, False),     # young: keep (a launch may be about to use it)
    (2 * HOUR, 60.0, False),    # used a minute ago: keep
    (2 * HOUR, 2 * HOUR, True),  # last used long ago: delete
])
def test_unused_launch_templates(ec2: Any, *, cloud: AwsCloud, kube: KubeCluster, age: float,
                                 used_ago: float | None, deleted: bool) -> None:
    tid = _template(ec2, f"eks-autoscaler/{CLUSTER.name}/abc")
    created = cloud.launch_templates()[0].created_at
    now = created + age
    if used_ago is not None:
        cloud.templates._used[f"eks-autoscaler/{CLUSTER.name}/abc"] = now - used_ago
    result = sweep(kube, cloud, now=now)
    assert (result.deleted_templates == [f"eks-autoscaler/{CLUSTER.name}/abc"]) is deleted
    remaining = [t["LaunchTemplateId"] for t in ec2.describe_launch_templates()["LaunchTemplates"]]
    assert (tid in remaining) is not deleted


def test_dry_run_reports_and_changes_nothing(ec2: Any, network: Network, cloud: AwsCloud,
                                             kube_api: KubeApiServer, kube: KubeCluster) -> None:
    launch(ec2, network)
    _template(ec2, f"eks-autoscaler/{CLUSTER.name}/abc")
    launched = cloud.owned_instances()[0].launch_time
    result = sweep(kube, cloud, now=launched + 2 * HOUR, dry_run=True)
    assert result.timed_out and result.deleted_templates
    assert cloud.owned_instances() and cloud.launch_templates() and cloud.unavailable() == frozenset()


def test_mark_unavailable(cloud: AwsCloud) -> None:
    cloud.mark_unavailable("m5.large", "us-east-1b", "spot")
    assert cloud.unavailable() == {("m5.large", "us-east-1b", "spot")}
    assert cloud.fleet.unavailable.is_unavailable("m5.large", "us-east-1b", "spot")
    assert not cloud.fleet.unavailable.is_unavailable("m5.large", "us-east-1a", "spot")


def test_instances_carry_the_launch_tags(ec2: Any, network: Network) -> None:
    inst = launch(ec2, network)
    assert tags_of(inst)["karpenter.sh/nodeclaim"] == "default-abc"


def test_a_refused_termination_does_not_stop_the_sweep(ec2: Any, network: Network, cloud: AwsCloud,
                                                        kube: KubeCluster) -> None:
    # GIVEN two instances that never registered, one with termination protection (EC2 then answers
    # OperationNotPermitted); wave 1 let that error abort every provisioner pass
    protected, plain = launch(ec2, network), launch(ec2, network)
    ec2.modify_instance_attribute(InstanceId=protected["InstanceId"], DisableApiTermination={"Value": True})
    launched = max(i.launch_time for i in cloud.owned_instances())
    # WHEN the sweep times them out
    result = sweep(kube, cloud, now=launched + HOUR)
    # THEN the other is terminated, the refusal is reported, and the next sweep tries again
    assert result.timed_out == [plain["InstanceId"]]
    assert [e for e in result.errors if protected["InstanceId"] in e and "OperationNotPermitted" in e]
    assert sweep(kube, cloud, now=launched + HOUR).errors


def test_an_initialised_node_is_labelled_once_ready_without_registration_or_startup_taints(
        ec2: Any, network: Network, kube_api: KubeApiServer, cloud: AwsCloud, kube: KubeCluster) -> None:
    inst = launch(ec2, network)
    raw = node_for(inst)
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    kube_api.store.create("nodes", raw)
    now = cloud.owned_instances()[0].launch_time + 60
    # When one sweep removes karpenter.sh/unregistered from the Ready node
    first = sweep(kube, cloud, now=now)
    # Then the same sweep initialises it (a woken pass must not leave that to the next safety pass), once
    assert first.untainted == ["n1"] and first.relabeled["n1"]["karpenter.sh/initialized"] == "true"
    assert kube.get_node("n1").labels["karpenter.sh/initialized"] == "true"  # type: ignore[union-attr]
    assert not sweep(kube, cloud, now=now).changed
