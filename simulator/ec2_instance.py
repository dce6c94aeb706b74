"""An EC2 instance as the simulated world reads it from DescribeInstances: its own reading of EC2's fields
(zone, capacity type, tags), not the product's parser, because those are facts the judge must get right
itself. Shared by the simulated cloud (``sim/cloud.py``) and the harness's kubelet (``local.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.eks_node import capacity_type_of

NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
PODS_TAG_PREFIX = "eks-serverless-autoscaler/pods-"  # the product's launch tags: pods-1, pods-2, ... (space-separated)


@dataclass(frozen=True)
class Ec2Instance:
    """A DescribeInstances ``Instance`` as the simulated world reads it (its own reading of EC2's fields,
    not the product's parser: zone, capacity type and tags are facts the judge must get right itself)."""

    instance_id: str
    instance_type: str
    zone: str
    state: str
    capacity_type: str
    tags: dict[str, str]
    private_dns_name: str
    raw: dict[str, Any]

    @property
    def node_pool(self) -> str:
        return self.tags.get(NODEPOOL_TAG, "")

    @property
    def claim_id(self) -> str:
        return self.tags.get(NODECLAIM_TAG, "")

    @property
    def image_id(self) -> str:
        return str(self.raw.get("ImageId") or "")

    @property
    def reservation_id(self) -> str:
        return str(self.raw.get("CapacityReservationId") or "")

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.instance_id}"

    def launch_pods(self) -> tuple[str, ...]:
        """The pods the product tagged the instance with (``<prefix>1``, ``<prefix>2``, ... in order)."""
        numbered = sorted((int(k[len(PODS_TAG_PREFIX):]), v) for k, v in self.tags.items()
                          if k.startswith(PODS_TAG_PREFIX) and k[len(PODS_TAG_PREFIX):].isdigit())
        return tuple(key for _, value in numbered for key in value.split())


def ec2_instance(raw: dict[str, Any]) -> Ec2Instance:
    return Ec2Instance(
        instance_id=str(raw["InstanceId"]), instance_type=str(raw["InstanceType"]),
        zone=str((raw.get("Placement") or {}).get("AvailabilityZone") or ""),
        state=str((raw.get("State") or {}).get("Name", "running")), capacity_type=capacity_type_of(raw),
        tags={str(t["Key"]): str(t.get("Value", "")) for t in raw.get("Tags") or ()},
        private_dns_name=str(raw.get("PrivateDnsName", "")), raw=raw)
