"""moto's EC2 tag lookups made linear, for benchmarks with thousands of instances (simulator-side only).

moto 5 finds one resource's tags by scanning every tag of every EC2 resource (``TaggedEC2Resource.get_tags``
-> ``describe_tags(filters={"resource-id": [id]})``, which also compiles a regular expression from the id):
DescribeInstances with tag filters then costs O(instances x all tags), and at 12,000 instances one page of
1,000 takes minutes where EC2 answers in well under a second. ``index_ec2_tags`` replaces that lookup
with a direct read of the backend's per-resource tag dictionary; the answer (keys, values, resource type)
is the same. ``find_instances_directly`` does the same for ``get_instance`` (every launched instance's
root volume looks its instance up, and each lookup copied every reservation: quadratic in a fleet of
10,000). ``cheap_transaction_backups`` does the same for DynamoDB's TransactWriteItems, which
deep-copies the whole table once per item of the transaction (to roll back on failure): with 10,000
node claims in the table each 25-item transaction copied 250,000 items. Call them in the process that
runs moto, never in the process being measured.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any


def index_ec2_tags() -> None:
    """Patch moto's EC2 resources to read their own tags directly (idempotent)."""
    from moto.ec2.models.core import TaggedEC2Resource  # noqa: PLC0415
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix  # noqa: PLC0415

    if getattr(TaggedEC2Resource.get_tags, "_indexed", False):
        return

    def get_tags(self: Any) -> list[dict[str, str]]:
        resource_id = getattr(self, "id", None)
        if not resource_id:
            return []
        tags = self.ec2_backend.tags.get(resource_id)
        if not tags:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
        return [{"resource_id": resource_id, "key": k, "value": v, "resource_type": kind} for k, v in tags.items()]

    get_tags._indexed = True  # type: ignore[attr-defined]
    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]


class _TableBackups:
    """Stands in for the ``copy`` module inside ``moto.dynamodb.models``: a Table is backed up by copying
    its item index (the Items themselves are shared). Enough to roll back Put and Delete, which replace
    or remove Items; an Update mutates its Item in place, and rolling one back needs moto's deep copy
    (the autoscaler's transactions only Put)."""

    def deepcopy(self, obj: Any, memo: dict[int, Any] | None = None) -> Any:
        from moto.dynamodb.models.table import Table  # noqa: PLC0415

        if isinstance(obj, Table):
            backup = copy.copy(obj)
            backup.items = defaultdict(dict, {k: dict(v) if isinstance(v, dict) else v for k, v in obj.items.items()})
            return backup
        return copy.deepcopy(obj, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def cheap_transaction_backups() -> None:
    """Patch moto's DynamoDB TransactWriteItems to back tables up by their item index (idempotent)."""
    import moto.dynamodb.models as dynamodb_models  # noqa: PLC0415

    dynamodb_models.copy = _TableBackups()  # type: ignore[assignment]


def find_instances_directly() -> None:
    """Patch moto's ``InstanceBackend.get_instance`` to search the reservations, newest first, without
    copying them (idempotent): the instance being launched is in the newest one."""
    from moto.ec2.exceptions import InvalidInstanceIdError  # noqa: PLC0415
    from moto.ec2.models.instances import InstanceBackend  # noqa: PLC0415

    if getattr(InstanceBackend.get_instance, "_direct", False):
        return

    def get_instance(self: Any, instance_id: str) -> Any:
        for reservation in reversed(self.reservations.values()):
            for instance in reservation.instances:
                if instance.id == instance_id:
                    return instance
        raise InvalidInstanceIdError(instance_id)

    get_instance._direct = True  # type: ignore[attr-defined]
    InstanceBackend.get_instance = get_instance  # type: ignore[method-assign]
