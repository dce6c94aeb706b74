"""Instances this cluster's autoscaler launched, found by their tags (the product's only state), the ones
Karpenter launched for the cluster, and termination that refuses any instance without this cluster's
ownership tags (or, with ``migration.adoptKarpenterNodes``, that Karpenter did not launch for it)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from autoscaler.adapters.aws._calls import Caller
from autoscaler.app.ports import CloudNotFoundError
from autoscaler.domain.fleet import CloudInstance, instance_from_ec2
from autoscaler.domain.keys import MANAGED_BY_TAG, NODECLAIM_TAG, NODEPOOL_TAG, PROVISIONER_NAME_TAG
from autoscaler.domain.ownership import OwnershipError, cluster_tag, launched_by_karpenter, ownership_problem

LIVE_STATES = ("pending", "running")
# Values one DescribeInstances filter takes at most (EC2 refuses more).
FILTER_VALUES = 200
# What the product reads of a listed instance (``instance_from_ec2`` and ``CloudInstance``'s properties):
# the rest of each Instance (network interfaces, block devices, ...) is dropped as each page is read, so
# a pass listing 10,000 instances does not hold ~10,000 full DescribeInstances objects.
KEPT_FIELDS = ("InstanceId", "InstanceType", "Placement", "State", "InstanceLifecycle", "LaunchTime", "Tags",
               "PrivateDnsName", "PrivateIpAddress", "ImageId", "SubnetId", "VpcId", "SecurityGroups", "Architecture",
               "CapacityReservationId")


class Instances:
    def __init__(self, ec2: Any, *, cluster_name: str, adopt_karpenter: bool = False) -> None:
        self._ec2 = Caller(ec2)
        self._cluster = cluster_name
        self.adopt_karpenter = adopt_karpenter

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._ec2.calls)

    def owned(self, states: Iterable[str] = LIVE_STATES) -> list[CloudInstance]:
        """Every instance carrying this cluster's managed-by and cluster tags, in ``states``."""
        filters = [
            {"Name": f"tag:{MANAGED_BY_TAG}", "Values": [self._cluster]},
            {"Name": f"tag:{cluster_tag(self._cluster)}", "Values": ["owned"]},
            {"Name": "instance-state-name", "Values": list(states)},
        ]
        return self._list(filters)

    def of_claims(self, claim_ids: Iterable[str], states: Iterable[str] = LIVE_STATES) -> list[CloudInstance]:
        """This cluster's instances in ``states`` whose node-claim tag is one of ``claim_ids``: what became of a
        launch whose answer was lost, found by a filter instead of a listing of every instance."""
        ids = sorted(set(claim_ids))
        out: list[CloudInstance] = []
        for start in range(0, len(ids), FILTER_VALUES):
            out += self._list([
                {"Name": f"tag:{NODECLAIM_TAG}", "Values": ids[start:start + FILTER_VALUES]},
                {"Name": f"tag:{cluster_tag(self._cluster)}", "Values": ["owned"]},
                {"Name": "instance-state-name", "Values": list(states)},
            ])
        return sorted(out, key=lambda i: i.instance_id)

    def karpenter_launched(self, states: Iterable[str] = LIVE_STATES) -> list[CloudInstance]:
        """Instances Karpenter launched for this cluster (adopted or not), in ``states``."""
        filters = [{"Name": "tag-key", "Values": [NODEPOOL_TAG, PROVISIONER_NAME_TAG]},
                   {"Name": "instance-state-name", "Values": list(states)}]
        return [i for i in self._list(filters) if launched_by_karpenter(i.tags, self._cluster)]

    def _list(self, filters: list[dict[str, Any]]) -> list[CloudInstance]:
        out: list[CloudInstance] = []
        # Pages of 1,000 (EC2's maximum): without MaxResults one response holds every instance.
        for page in self._ec2.pages("describe_instances", Filters=filters, PaginationConfig={"PageSize": 1000}):
            for res in page.get("Reservations", ()):
                out.extend(instance_from_ec2({k: i[k] for k in KEPT_FIELDS if k in i})
                           for i in res.get("Instances", ()))
        return sorted(out, key=lambda i: i.instance_id)

    def in_flight(self, registered_instance_ids: Collection[str]) -> list[CloudInstance]:
        """Owned, pending or running instances that are not yet a registered node."""
        return [i for i in self.owned() if i.instance_id not in registered_instance_ids]

    def describe(self, instance_ids: Iterable[str]) -> list[CloudInstance]:
        """The instances that exist among ``instance_ids`` (unknown ids are left out, not an error)."""
        ids = sorted(set(instance_ids))
        if not ids:
            return []
        try:
            pages = list(self._ec2.pages("describe_instances", InstanceIds=ids))
        except CloudNotFoundError:
            # One unknown id fails the whole call; ask one by one so the known ones still come back.
            found = []
            for iid in ids:
                found.extend(self.describe_one(iid))
            return found
        return [instance_from_ec2(i) for p in pages for r in p.get("Reservations", ()) for i in r.get("Instances", ())]

    def describe_one(self, instance_id: str) -> list[CloudInstance]:
        try:
            resp = self._ec2("describe_instances", InstanceIds=[instance_id],
                             expected_errors=("InvalidInstanceID.NotFound",))
        except CloudNotFoundError:
            return []
        return [instance_from_ec2(i) for r in resp.get("Reservations", ()) for i in r.get("Instances", ())]

    def terminate(self, instance_ids: Iterable[str]) -> list[str]:
        """Terminate instances, all or none: raises OwnershipError naming the first instance that lacks
        this cluster's tags before anything is terminated. Ids already gone are skipped. Returns the
        ids asked to terminate."""
        found = self.describe(instance_ids)
        for inst in found:
            problem = ownership_problem(inst.tags, self._cluster, adopt_karpenter=self.adopt_karpenter)
            if problem is not None:
                raise OwnershipError(inst.instance_id, problem)
        ids = [i.instance_id for i in found if i.state not in ("terminated", "shutting-down")]
        if ids:
            self._ec2("terminate_instances", InstanceIds=ids)
        return ids
