"""EKS managed node groups in the simulation: capacity that is not the autoscaler's, as a cluster
migrating from the Cluster Autoscaler has it.

A group's instances are real moto instances tagged ``eks:nodegroup-name`` (never the autoscaler's
ownership tags), registered as Ready Nodes labelled ``eks.amazonaws.com/nodegroup`` without the
autoscaler's registration taint. Shrinking a group does what EKS does on a scale-in
(https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html): the chosen nodes
are cordoned and drained through the Eviction API, which honours PodDisruptionBudgets (refused evictions
are retried every ``retry_seconds``, for at most ``drain_timeout_seconds``, 15 minutes, after which
EKS gives up and terminates anyway); then the instance is terminated.

Nodes Karpenter launched before a migration to the autoscaler (``initial.karpenterNodes``) are seeded the
same way: instances with the tags Karpenter gives them, registered Ready Nodes with its labels and its
``karpenter.sh/termination`` finalizer, and no controller of their own (Karpenter is scaled to zero).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from simulator.ec2_instance import ec2_instance
from simulator.kube_store import ApiError, Store
from simulator.local import node_manifest
from simulator.sim.cloud import CloudWorld, InstanceRecord
from simulator.sim.engine import EventLoop

# Karpenter's and EKS's names, written from their documentation (the simulated world imports no product code).
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
PROVISIONER_NAME_LABEL = "karpenter.sh/provisioner-name"  # v1alpha5 (Karpenter v0.2x)
KARPENTER_TERMINATION_FINALIZER = "karpenter.sh/termination"
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
EKS_CLUSTER_TAG = "eks:eks-cluster-name"


def cluster_tag(cluster_name: str) -> str:
    return f"kubernetes.io/cluster/{cluster_name}"


NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
NODEGROUP_TAG = "eks:nodegroup-name"
KARPENTER_MANAGED_BY_TAG = "karpenter.sh/managed-by"  # Karpenter's own, never the autoscaler's managed-by tag


@dataclass
class NodeGroup:
    name: str
    instance_type: str = "m5.large"
    size: int = 3
    capacity_type: str = "on-demand"
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class KarpenterNodeSet:
    """``count`` nodes Karpenter launched for NodePool (v1) or Provisioner (v0.2x) ``node_pool``."""

    node_pool: str
    version: str = "v1"
    instance_type: str = "m5.large"
    count: int = 2
    capacity_type: str = "on-demand"
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class ManagedNodeGroups:
    loop: EventLoop
    store: Store
    cloud: CloudWorld
    instance_types: Any  # () -> Mapping[str, InstanceType]
    region: str
    subnets: dict[str, str]
    image_id: str
    retry_seconds: float = 5.0
    drain_timeout_seconds: float = 900.0
    members: dict[str, list[InstanceRecord]] = field(default_factory=dict)
    log: Any = None  # (source, text) -> None

    def create(self, group: NodeGroup) -> None:
        """Launch the group's instances and register their Nodes at once (the cluster exists already)."""
        zones = sorted(self.subnets)
        for i in range(group.size):
            zone = zones[i % len(zones)]
            reservation = self.cloud.ec2.run_instances(
                ImageId=self.image_id, InstanceType=group.instance_type, MinCount=1, MaxCount=1,
                SubnetId=self.subnets[zone],
                TagSpecifications=[{"ResourceType": "instance", "Tags": [
                    {"Key": NODEGROUP_TAG, "Value": group.name}, {"Key": "Name", "Value": f"{group.name}-{i}"}]}])
            raw = reservation["Instances"][0]
            record = self.cloud.instances[raw["InstanceId"]]
            record.instance = ec2_instance(raw)
            self._register(group, record)
            self.members.setdefault(group.name, []).append(record)

    def create_karpenter_nodes(self, spec: KarpenterNodeSet, *, cluster: str) -> list[str]:
        """Launch and register nodes as Karpenter left them; returns the Node names."""
        pool_key = NODEPOOL_LABEL if spec.version == "v1" else PROVISIONER_NAME_LABEL
        tags = {cluster_tag(cluster): "owned", EKS_CLUSTER_TAG: cluster, KARPENTER_MANAGED_BY_TAG: cluster,
                pool_key: spec.node_pool}
        if spec.version == "v1":
            tags[NODECLASS_TAG] = "default"
        market = {"InstanceMarketOptions": {"MarketType": "spot"}} if spec.capacity_type == "spot" else {}
        zones, names = sorted(self.subnets), []
        for i in range(spec.count):
            zone = zones[i % len(zones)]
            reservation = self.cloud.ec2.run_instances(
                ImageId=self.image_id, InstanceType=spec.instance_type, MinCount=1, MaxCount=1,
                SubnetId=self.subnets[zone], **market,
                TagSpecifications=[{"ResourceType": "instance", "Tags": [
                    {"Key": k, "Value": v} for k, v in {**tags, "Name": f"karpenter-{spec.node_pool}-{i}"}.items()]}])
            record = self.cloud.instances[reservation["Instances"][0]["InstanceId"]]
            record.instance = inst = ec2_instance(reservation["Instances"][0])
            manifest = node_manifest(inst, region=self.region)
            labels = manifest["metadata"]["labels"]
            labels.pop(NODEPOOL_LABEL, None)
            labels.update({pool_key: spec.node_pool, CAPACITY_TYPE_LABEL: spec.capacity_type,
                           "karpenter.sh/registered": "true", "karpenter.sh/initialized": "true", **spec.labels})
            manifest["metadata"]["finalizers"] = [KARPENTER_TERMINATION_FINALIZER]
            manifest["spec"]["taints"] = []
            self.store.create("nodes", manifest)
            record.node_name = manifest["metadata"]["name"]
            names.append(record.node_name)
        return names

    def _register(self, group: NodeGroup, record: InstanceRecord) -> None:
        inst = record.instance
        assert inst is not None
        manifest = node_manifest(inst, region=self.region)
        labels = manifest["metadata"]["labels"]
        for key in ("karpenter.sh/nodepool", "karpenter.sh/capacity-type"):
            labels.pop(key, None)
        labels.update({NODEGROUP_LABEL: group.name,
                       "eks.amazonaws.com/capacityType": "SPOT" if group.capacity_type == "spot" else "ON_DEMAND",
                       **group.labels})
        manifest["spec"]["taints"] = []
        self.store.create("nodes", manifest)
        record.node_name = manifest["metadata"]["name"]

    def shrink(self, name: str, size: int) -> None:
        members = [r for r in self.members.get(name, []) if r.alive]
        if name not in self.members:
            raise KeyError(f"shrinkNodeGroup: no node group {name!r} in the scenario's initial nodeGroups")
        for record in members[size:][::-1]:
            self.drain_and_terminate(record)

    def drain_and_terminate(self, record: InstanceRecord) -> None:
        """Cordon the instance's node, evict its pods (PDBs honoured, retried) and terminate it once they
        are gone or the drain timed out: an Auto Scaling scale-in with EKS's drain."""
        node = record.node_name
        if node is None:
            self.cloud.terminate([record.instance_id])
            return
        self.store.patch("nodes", None, node, {"spec": {"unschedulable": True}})
        started = self.loop.now

        def attempt() -> None:
            left = [p for p in self.store.list("pods", field_selector=f"spec.nodeName={node}")
                    if not _daemon(p)]
            for pod in left:
                if pod["metadata"].get("deletionTimestamp"):
                    continue
                with contextlib.suppress(ApiError):  # a PDB said no: retried on the next attempt
                    self.store.evict(pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])
            if not left or self.loop.now - started >= self.drain_timeout_seconds:
                if self.log is not None:
                    self.log("nodegroup", f"node {node} drained in {self.loop.now - started:.0f} s; instance "
                                          f"{record.instance_id} terminated")
                self.cloud.terminate([record.instance_id])
                return
            self.loop.after(self.retry_seconds, f"drain {node}", attempt)

        attempt()


def _daemon(pod: dict[str, Any]) -> bool:
    return any(o.get("kind") == "DaemonSet" for o in pod["metadata"].get("ownerReferences") or ())
