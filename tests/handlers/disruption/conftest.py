"""A small world for the disruption function: moto (in-process) for EC2, the Kubernetes API emulator,
a manual clock, and helpers that launch owned instances and register them as Nodes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.clock import ManualClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.launcher import new_claim_id
from autoscaler.config import ClusterConfig, DeploymentEnv
from autoscaler.domain.allocatable import allocatable
from autoscaler.domain.fleet import FleetRequest
from autoscaler.domain.nodeclass import parse_node_classes
from autoscaler.domain.nodepool import parse_node_pools
from autoscaler.domain.spec_hash import node_pool_hash
from autoscaler.handlers import disruption
from autoscaler.handlers.runtime import Runtime, set_runtime
from autoscaler.metrics_catalog import RecordingSink
from simulator.ec2_groups import install_launch_template_groups
from simulator.kube_api import KubeApiServer, client_for
from simulator.local import LambdaContext, on_demand_prices
from tests.adapters.aws.conftest import moto_catalog  # noqa: F401 - shared session fixture
from tests.adapters.aws.helpers import CLUSTER, REGION, make_network, price_list_item, seed_eks_amis
from tests.moto_env import moto_environment

NODE_CLASS = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
              "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}],
                       "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                       "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                       "instanceProfile": "KarpenterNodeInstanceProfile"}}


def node_pool(*, consolidate_after: str = "30s", expire_after: str = "720h", policy: str = "WhenEmptyOrUnderutilized",
              budgets: list[dict[str, Any]] | None = None, families: tuple[str, ...] = ("m5", "c5"),
              replicas: int | None = None, limits: dict[str, Any] | None = None,
              labels: dict[str, str] | None = None,
              requirements: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    disruption_spec: dict[str, Any] = {"consolidationPolicy": policy, "consolidateAfter": consolidate_after,
                                       "budgets": budgets or [{"nodes": "100%"}]}
    spec: dict[str, Any] = {"template": {"metadata": {"labels": labels or {}}, "spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "expireAfter": expire_after,
        "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": list(families)},
                         *(requirements or [])]}},
        "disruption": disruption_spec}
    if replicas is not None:
        spec["replicas"] = replicas
    if limits is not None:
        spec["limits"] = limits
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": spec}


class World:
    pool_specs: list[dict[str, Any]]
    node_class_spec: dict[str, Any]

    def __init__(self, *, kube: KubeApiServer, ec2: Any, catalog: Any, pools: list[dict[str, Any]],
                 disruption_cfg: dict[str, Any], migration: dict[str, Any] | None = None) -> None:
        self.kube, self.store, self.ec2 = kube, kube.store, ec2
        self.clock = ManualClock()
        self.sink = RecordingSink()
        seed_eks_amis(ec2)
        self.network = make_network(ec2)
        install_launch_template_groups(ec2.meta.events, lambda: ec2)
        pricing = boto3.client("pricing", region_name=REGION)
        self._stub = Stubber(pricing)
        self._stub.add_response("get_products", {
            "FormatVersion": "aws_v1", "PriceList": [price_list_item(k, v) for k, v in on_demand_prices().items()]})
        self._stub.activate()
        self.migration_cfg = migration or {}
        self.cloud = AwsCloud(ec2=ec2, ssm=boto3.client("ssm", region_name=REGION),
                              iam=boto3.client("iam", region_name=REGION), pricing=pricing, region=REGION,
                              cluster=CLUSTER, clock=self.clock, catalog_ttl=10 * 86400,
                              adopt_karpenter=bool(self.migration_cfg.get("adoptKarpenterNodes")))
        self.cloud.catalog.load(*catalog)
        self.cluster = KubeCluster(client_for(kube.url), clock=self.clock, sleep=self.clock.advance)
        self.disruption_cfg = disruption_cfg
        self.reconfigure(pools=pools, node_class=NODE_CLASS)
        self.prices = on_demand_prices()

    def reconfigure(self, *, pools: list[dict[str, Any]] | None = None,
                    node_class: dict[str, Any] | None = None) -> None:
        """Deploy a changed cluster file: the next pass sees these NodePools / this EC2NodeClass."""
        self.pool_specs = pools or self.pool_specs
        self.node_class_spec = node_class or self.node_class_spec
        self.config = ClusterConfig.model_validate({
            "clusterName": CLUSTER.name, "region": REGION, "nodePools": self.pool_specs,
            "nodeClasses": [self.node_class_spec], "disruption": self.disruption_cfg,
            "migration": self.migration_cfg})
        self.runtime = Runtime(
            config=self.config, env=DeploymentEnv(), node_pools=parse_node_pools(self.config.node_pools),
            node_classes=parse_node_classes(self.config.node_classes, default_role=self.config.node_role_name),
            cloud=self.cloud, cluster=self.cluster, clock=self.clock, sink=self.sink,
            session=boto3.Session(region_name=REGION))
        set_runtime(self.runtime)

    # ----- EC2 + Kubernetes ------------------------------------------------------------------
    def launch(self, instance_type: str = "m5.large", *, zone: str = "us-east-1a") -> str:
        """An owned instance launched through the real launcher; returns its instance id."""
        pools = {p.name: p for p in self.runtime.node_pools}
        result = self.cloud.launch(FleetRequest(
            claim_id=new_claim_id("default"), cluster_name=CLUSTER.name, node_pool="default",
            node_class=self.runtime.node_classes["default"], capacity_types=("on-demand",),
            instance_types=(instance_type,), zones=(zone,), node_pool_hash=node_pool_hash(pools["default"])))
        assert pools and result.launched, result.errors
        return result.launched[0].instance_id

    def foreign_instance(self, instance_type: str = "m5.large") -> str:
        image = seed_eks_amis(self.ec2)["amd64"]
        return str(self.ec2.run_instances(ImageId=image, InstanceType=instance_type, MinCount=1, MaxCount=1,
                                          Placement={"AvailabilityZone": "us-east-1a"})["Instances"][0]["InstanceId"])

    def karpenter_instance(self, *, pool_tag: str = "karpenter.sh/nodepool", pool: str = "default",
                           cluster: str = CLUSTER.name, instance_type: str = "m5.large") -> str:
        """An instance as Karpenter launches it: its NodePool (v1) or Provisioner (v0.2x) tag and the
        cluster tag, none of the autoscaler's own."""
        image = seed_eks_amis(self.ec2)["amd64"]
        tags = {f"kubernetes.io/cluster/{cluster}": "owned", pool_tag: pool, "Name": f"karpenter/{pool}"}
        if pool_tag == "karpenter.sh/nodepool":
            tags.update({"eks:eks-cluster-name": cluster, "karpenter.k8s.aws/ec2nodeclass": "default"})
        return str(self.ec2.run_instances(
            ImageId=image, InstanceType=instance_type, MinCount=1, MaxCount=1,
            Placement={"AvailabilityZone": "us-east-1a"},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        )["Instances"][0]["InstanceId"])

    def register(self, instance_id: str, *, name: str | None = None, pool: str | None = "default",
                 annotations: dict[str, str] | None = None, age: float = 0.0,
                 pool_label: str = "karpenter.sh/nodepool", finalizers: list[str] | None = None,
                 conditions: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None) -> str:
        """Create the Node the kubelet would register for ``instance_id``."""
        [raw] = [i for r in self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
                 for i in r["Instances"]]
        it_name, zone = raw["InstanceType"], raw["Placement"]["AvailabilityZone"]
        capacity_type = "spot" if raw.get("InstanceLifecycle") == "spot" else "on-demand"
        alloc = allocatable(self.cloud.instance_types()[it_name])
        name = name or f"ip-{instance_id[2:]}.ec2.internal"
        extra_labels = labels
        labels = {"kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": it_name,
                  "topology.kubernetes.io/zone": zone, "karpenter.sh/capacity-type": capacity_type,
                  "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}
        labels = {**labels, **(extra_labels or {})}
        if pool:
            labels[pool_label] = pool
        quantities = {"cpu": f"{alloc['cpu']}m", "memory": str(alloc["memory"]), "pods": str(alloc["pods"])}
        self.store.create("nodes", {
            "metadata": {"name": name, "labels": labels, "annotations": annotations or {},
                         "creationTimestamp": stamp(self.clock.now() - age), "finalizers": finalizers or []},
            "spec": {"providerID": f"aws:///{zone}/{instance_id}"},
            "status": {"allocatable": quantities, "capacity": quantities,
                       "conditions": conditions or [{"type": "Ready", "status": "True"}]}})
        return name

    def node(self, instance_type: str = "m5.large", **kw: Any) -> str:
        return self.register(self.launch(instance_type), **kw)

    def pod(self, name: str, node: str | None, *, cpu: str = "250m", memory: str = "256Mi",
            labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
            owner: str | None = "ReplicaSet", ready: bool = True) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels or {"app": name},
                                "annotations": annotations or {}, "creationTimestamp": stamp(self.clock.now())}
        if owner:
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-rs",
                                        "uid": f"uid-{name}", "controller": True}]
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "nginx",
                                                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
        status: dict[str, Any] = {"phase": "Pending"}
        if node:
            spec["nodeName"] = node
            status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
        self.store.create("pods", {"metadata": meta, "spec": spec, "status": status})

    # ----- observing -------------------------------------------------------------------------
    def run(self, event: dict[str, Any] | None = None) -> dict[str, Any]:
        context = LambdaContext(function_name="disruption", remaining_ms=300_000)
        result: dict[str, Any] = disruption.handler(event or {"source": "schedule", "kind": "disruption"}, context)
        return result

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["metadata"]["name"]: n for n in self.store.objects("nodes")}

    def pods_on(self, node: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.store.objects("pods")
                      if (p.get("spec") or {}).get("nodeName") == node)

    def state(self, instance_id: str) -> str:
        [raw] = [i for r in self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
                 for i in r["Instances"]]
        return str(raw["State"]["Name"])

    def live_instances(self) -> list[dict[str, Any]]:
        return [i for r in self.ec2.describe_instances()["Reservations"] for i in r["Instances"]
                if i["State"]["Name"] in ("pending", "running")]

    def hourly_cost(self) -> float:
        return round(sum(self.prices[i["InstanceType"]] for i in self.live_instances()), 6)

    def event_messages(self, node: str) -> list[str]:
        return [str(e.get("message")) for e in self.store.objects("events") if e["involvedObject"]["name"] == node]

    def events(self, node: str) -> list[str]:
        return [e["reason"] for e in self.store.objects("events") if e["involvedObject"]["name"] == node]


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with moto_environment(monkeypatch, REGION):
        yield
    set_runtime(None)


@pytest.fixture
def make_world(aws_env: None, kube_api: KubeApiServer, moto_catalog: Any) -> Any:  # noqa: F811
    def build(*, pools: list[dict[str, Any]] | None = None, migration: dict[str, Any] | None = None,
              **disruption_cfg: Any) -> World:
        return World(kube=kube_api, ec2=boto3.client("ec2", region_name=REGION), catalog=moto_catalog,
                     pools=pools or [node_pool()], disruption_cfg=disruption_cfg, migration=migration)
    return build
