"""EKS managed node groups in the simulation: capacity that is not the autoscaler's, as a cluster
migrating from the Cluster Autoscaler has it.

A group's instances are real moto instances tagged ``eks:nodegroup-name`` (never the autoscaler's
ownership tags), registered as Ready Nodes labelled ``eks.amazonaws.com/nodegroup`` without the
autoscaler's registration taint. Shrinking a group does what EKS does on a scale-in
(https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html): the chosen nodes
are cordoned and drained through the Eviction API, which honours PodDisruptionBudgets (refused evictions
are retried every ``retry_seconds``, for at most ``drain_timeout_seconds``, 15 minutes, after which
EKS gives up and terminates anyway); then the instance is terminated.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from autoscaler.domain.fleet import instance_from_ec2
from simulator.kube_store import ApiError, Store
from simulator.local import node_manifest
from simulator.sim.cloud import CloudWorld, InstanceRecord
from simulator.sim.engine import EventLoop

NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
NODEGROUP_TAG = "eks:nodegroup-name"


@dataclass
class NodeGroup:
    name: str
    instance_type: str = "m5.large"
    size: int = 3
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
            record.instance = instance_from_ec2(raw)
            self._register(group, record)
            self.members.setdefault(group.name, []).append(record)

    def _register(self, group: NodeGroup, record: InstanceRecord) -> None:
        inst = record.instance
        assert inst is not None
        manifest = node_manifest(inst, self.instance_types()[inst.instance_type], pool=None, region=self.region)
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
