"""moto made as strict as EC2 and DynamoDB where a pass at scale depends on it (simulator-side only).

- ``page_instances_by_instance``: EC2's DescribeInstances pages by *instance* (``MaxResults`` 5-1,000,
  counted in instances; a reservation is split across pages when it must be), where moto pages by
  reservation, so one CreateFleet of 200 instances, or 10,000 instances in a few reservations, came back in
  one page. The NextToken is opaque; with no ``MaxResults`` (and no instance ids) every instance comes back
  in one answer, as EC2 does.
- ``throttle_dynamodb_partitions``: DynamoDB's per-partition write limit. A partition-key value lives in
  one partition, and one partition serves at most 1,000 write capacity units a second (on-demand tables
  included; adaptive capacity moves hot keys apart but never past that). Each write is charged as
  DynamoDB charges it: one unit per started KB of the item (its attribute names and values), twice that
  inside TransactWriteItems, at least one unit per delete. A write that would take a partition-key value
  past 1,000 units within the last second is refused as DynamoDB refuses it:
  ``ProvisionedThroughputExceededException`` for PutItem / DeleteItem / UpdateItem and for a
  BatchWriteItem none of whose items fit (the ones that do not fit come back in ``UnprocessedItems``
  otherwise), and ``TransactionCanceledException`` with a ``ThrottlingError`` reason for a transaction.
  The second is this process's wall clock, so the model is strict only as long as moto keeps up with a
  real table's pace; ``DynamoThrottle.stats()`` says what was charged and refused, per partition key.

Call them in the process that runs moto, never in the process being measured.
"""

from __future__ import annotations

import copy
import json
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

PARTITION_WCU_PER_SECOND = 1000
EC2_MAX_RESULTS = (5, 1000)
_TOKEN = "strict-page:"


def page_instances_by_instance() -> Callable[[], None]:
    """Patch moto's DescribeInstances to page by instance, as EC2 does (idempotent); returns the undo."""
    from moto.core.responses import ActionResult  # noqa: PLC0415
    from moto.ec2.exceptions import InvalidParameterCombination, InvalidParameterValueError  # noqa: PLC0415
    from moto.ec2.responses.instances import InstanceResponse  # noqa: PLC0415

    original = InstanceResponse.describe_instances
    if getattr(original, "_by_instance", False):
        return lambda: None

    def describe_instances(self: Any) -> Any:
        self.error_on_dryrun()
        if "InstanceId.1" in self.data and "MaxResults" in self.data:
            raise InvalidParameterCombination("The parameter instancesSet cannot be used with the parameter maxResults")
        filters = self._filters_from_querystring()
        ids = self._get_param("InstanceIds", [])
        reservations = (self.ec2_backend.get_reservations_by_instance_ids(ids, filters=filters) if ids
                        else self.ec2_backend.describe_instances(filters=filters))
        pairs = [(r, i) for r in reservations for i in r.instances]
        raw_max = self._get_param("MaxResults")
        if raw_max is None:
            size = len(pairs) or 1
        else:
            size = int(raw_max)
            if not EC2_MAX_RESULTS[0] <= size <= EC2_MAX_RESULTS[1]:
                raise InvalidParameterValueError(f"MaxResults {size}: must be from {EC2_MAX_RESULTS[0]} to "
                                                 f"{EC2_MAX_RESULTS[1]}")
        token = self._get_param("NextToken")
        start = int(token[len(_TOKEN):]) if token and token.startswith(_TOKEN) else 0
        page = pairs[start:start + size]
        out: list[Any] = []
        for reservation, instance in page:  # consecutive instances of one reservation stay together
            if not out or out[-1].id != reservation.id:
                part = copy.copy(reservation)
                part.instances = []
                out.append(part)
            out[-1].instances.append(instance)
        more = start + size < len(pairs)
        return ActionResult({"Reservations": out, "NextToken": f"{_TOKEN}{start + size}" if more else None})

    describe_instances._by_instance = True  # type: ignore[attr-defined]
    InstanceResponse.describe_instances = describe_instances  # type: ignore[method-assign]

    def undo() -> None:
        InstanceResponse.describe_instances = original  # type: ignore[method-assign]

    return undo


def item_wcu(item: dict[str, Any], *, transactional: bool = False) -> int:
    """Write units of one item as DynamoDB charges them: one per started KB of its attribute names and
    values (low-level JSON values, approximated by their compact JSON), doubled in a transaction."""
    size = sum(len(name.encode()) + len(json.dumps(value, separators=(",", ":")).encode()) for name, value in
               item.items())
    units = max(1, math.ceil(size / 1024))
    return units * 2 if transactional else units


class DynamoThrottle:
    """Write units charged per (table, partition-key value) over a sliding second; refuses what would exceed."""

    def __init__(self, *, limit: int = PARTITION_WCU_PER_SECOND, clock: Callable[[], float] = time.monotonic,
                 key_of: Callable[[str], str] | None = None) -> None:
        self.limit, self._clock = limit, clock
        self._key_of = key_of  # table -> its partition-key attribute name
        self._lock = threading.Lock()
        self._recent: dict[tuple[str, str], deque[tuple[float, int]]] = {}
        self.charged: Counter[str] = Counter()  # units per partition-key value
        self.refused: Counter[str] = Counter()  # writes refused per partition-key value
        self.peak: Counter[str] = Counter()  # highest units within one second per partition-key value

    def partition(self, table: str, item_or_key: dict[str, Any]) -> str:
        name = self._key_of(table) if self._key_of is not None else next(iter(item_or_key))
        value = item_or_key.get(name) or {}
        return str(next(iter(value.values()), "")) if isinstance(value, dict) else str(value)

    def admit(self, charges: list[tuple[str, str, int]]) -> bool:
        """Charge every (table, partition, units) or none: False when one partition would exceed the limit."""
        now = self._clock()
        with self._lock:
            wanted: Counter[tuple[str, str]] = Counter()
            for table, part, units in charges:
                wanted[(table, part)] += units
            for key, units in wanted.items():
                window = self._recent.setdefault(key, deque())
                while window and window[0][0] <= now - 1.0:
                    window.popleft()
                if sum(u for _, u in window) + units > self.limit:
                    for table, part, _ in charges:
                        if (table, part) == key:
                            self.refused[part] += 1
                    return False
            for key, units in wanted.items():
                window = self._recent[key]
                window.append((now, units))
                self.charged[key[1]] += units
                self.peak[key[1]] = max(self.peak[key[1]], sum(u for _, u in window))
            return True

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"limitWcuPerSecond": self.limit, "partitions": len(self.charged),
                    "wcuCharged": sum(self.charged.values()),
                    "maxWcuPerPartition": max(self.charged.values(), default=0),
                    "peakWcuPerPartitionSecond": max(self.peak.values(), default=0),
                    "throttledWrites": sum(self.refused.values())}


_THROTTLE: DynamoThrottle | None = None


def throttle_dynamodb_partitions(throttle: DynamoThrottle | None = None) -> tuple[DynamoThrottle, Callable[[], None]]:
    """Patch moto's DynamoDB write operations with the per-partition limit (once per process): the model
    and the undo (tests)."""
    global _THROTTLE  # noqa: PLW0603 - one model per moto process, as one table has one set of partitions
    from moto.dynamodb.exceptions import DynamodbException, TransactionCanceledException  # noqa: PLC0415
    from moto.dynamodb.responses import DynamoHandler  # noqa: PLC0415

    if _THROTTLE is not None:
        return _THROTTLE, lambda: None
    names = ("put_item", "delete_item", "update_item", "batch_write_item", "transact_write_items")
    originals = {name: getattr(DynamoHandler, name) for name in names}

    def hash_key(handler: Any, table: str) -> str:
        return str(handler.dynamodb_backend.get_table(table).hash_key_attr)

    model = throttle or DynamoThrottle()
    _THROTTLE = model

    def exceeded() -> Exception:
        return DynamodbException("com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                                 "The level of configured provisioned throughput for the table was exceeded. "
                                 "Consider increasing your provisioning level with the UpdateTable API.")

    def single(name: str, item_field: str) -> None:
        inner = getattr(DynamoHandler, name)

        def write(self: Any) -> Any:
            table = self.body["TableName"]
            item = self.body[item_field]
            part = item.get(hash_key(self, table), {})
            part_value = str(next(iter(part.values()), "")) if isinstance(part, dict) else ""
            if not model.admit([(table, part_value, item_wcu(item))]):
                raise exceeded()
            return inner(self)

        setattr(DynamoHandler, name, write)

    single("put_item", "Item")
    single("delete_item", "Key")
    single("update_item", "Key")

    batch = DynamoHandler.batch_write_item

    def batch_write_item(self: Any) -> Any:
        admitted: dict[str, list[Any]] = {}
        unprocessed: dict[str, list[Any]] = {}
        for table, requests in self.body["RequestItems"].items():
            key = hash_key(self, table)
            for request in requests:
                kind, body = next(iter(request.items()))
                item = body["Item"] if kind == "PutRequest" else body["Key"]
                value = item.get(key, {})
                part = str(next(iter(value.values()), "")) if isinstance(value, dict) else ""
                fits = model.admit([(table, part, item_wcu(item))])
                (admitted if fits else unprocessed).setdefault(table, []).append(request)
        if not admitted:
            raise exceeded()
        self.body["RequestItems"] = admitted
        result = batch(self)
        if unprocessed:
            result.result["UnprocessedItems"] = unprocessed  # type: ignore[index]
        return result

    DynamoHandler.batch_write_item = batch_write_item  # type: ignore[method-assign]

    transact = DynamoHandler.transact_write_items
    # DynamoDB makes TransactWriteItems idempotent by its ClientRequestToken (for 10 minutes), which botocore
    # fills in once per call and keeps across its retries: a retry of a transaction that was applied but whose
    # answer was lost succeeds again. moto ignores the token and refuses the retry's conditional puts.
    answered: dict[str, Any] = {}

    def transact_write_items(self: Any) -> Any:
        token = self.body.get("ClientRequestToken")
        if token and token in answered:
            return answered[token]
        charges = []
        for entry in self.body["TransactItems"]:
            op = next(iter(entry.values()))
            item = op.get("Item") or op.get("Key") or {}
            value = item.get(hash_key(self, op["TableName"]), {})
            part = str(next(iter(value.values()), "")) if isinstance(value, dict) else ""
            charges.append((op["TableName"], part, item_wcu(item, transactional=True)))
        if not model.admit(charges):
            raise TransactionCanceledException([("ThrottlingError", "Throughput exceeds the current capacity of "
                                                 "your table or index.", None)] * len(charges))
        result = transact(self)
        if token:
            answered[token] = result
        return result

    DynamoHandler.transact_write_items = transact_write_items  # type: ignore[method-assign]

    def undo() -> None:
        global _THROTTLE  # noqa: PLW0603
        for name, method in originals.items():
            setattr(DynamoHandler, name, method)
        _THROTTLE = None

    return model, undo
