"""``DynamoClaimStore``: node claims and the launch lease in one DynamoDB table (``ClaimStore``).

Why DynamoDB and not objects in the cluster: a claim must be written before every CreateFleet and read
by every pass with strong consistency, and the Kubernetes API calls of a pass are budgeted (a 50k-pod
burst must stay within a few hundred requests); one Query reads every claim of a cluster, and a
conditional write makes both the claim (never reused) and the lease (one launching pass) safe.

Table layout (the CDK stack creates it, on-demand billing, TTL on ``expiresAt``):
``cluster`` (partition key) = ``<cluster>#<shard>`` for a claim, the cluster name for the lease;
``id`` (sort key) = ``claim#<claim id>`` or ``lease``; ``doc`` = the claim as JSON (``Claim.to_json``);
``holder``/``until`` on the lease item.

Why shards: one partition-key value lives in one DynamoDB partition, and a partition takes at most 1,000
write units a second, on-demand or not. A 50,000-pod burst writes ~8,500 claims of 1-2 KB in a few
seconds, transactionally (two units per KB): tens of thousands of units, which under one key would be
throttled for most of a minute. A claim's shard is a hash of its id (``CLAIM_SHARDS`` of them), so a
burst spreads evenly; reading every claim is one Query per shard, run in parallel.

Items written before the shards (claims under the bare cluster name) are still read, and each one is moved
to its shard the first time it is updated (and deleted where it is): a deploy in the middle of a launch
loses no claim. The lease never moved.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from autoscaler.adapters.aws._calls import Caller
from autoscaler.app.ports import CloudError
from autoscaler.domain.claims import CLAIM_TTL_SECONDS, Claim

log = logging.getLogger(__name__)
PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE = "cluster", "id", "expiresAt"  # the CDK stack's table uses these
_CLAIM = "claim#"
_LEASE = "lease"
_TRANSACTION_ITEMS = 100  # TransactWriteItems' limit
_BATCH_ITEMS = 25  # BatchWriteItem's limit
_BATCH_ROUNDS = 8  # unprocessed items are retried this often before the call fails
# Partition-key values a cluster's claims are spread over: 16 x 1,000 write units a second (see above).
CLAIM_SHARDS = 16


def claim_shard(claim_id: str) -> int:
    """The shard of a claim: a stable hash of its id (every container, every version agrees)."""
    return zlib.crc32(claim_id.encode()) % CLAIM_SHARDS


def shard_keys(cluster_name: str) -> list[str]:
    """Every partition-key value this cluster's claims may be under (its shards, then the legacy key)."""
    return [*(f"{cluster_name}#{i:02d}" for i in range(CLAIM_SHARDS)), cluster_name]


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def create_table(dynamodb: Any, name: str) -> None:
    """Create the claims table as the CDK stack does (local runs and tests; Lambda never creates it)."""
    dynamodb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": PARTITION_KEY, "AttributeType": "S"},
                              {"AttributeName": SORT_KEY, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
                   {"AttributeName": SORT_KEY, "KeyType": "RANGE"}])
    dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True,
                                                                          "AttributeName": TTL_ATTRIBUTE})


class DynamoClaimStore:
    def __init__(self, dynamodb: Any, *, table: str, cluster_name: str) -> None:
        self._db = Caller(dynamodb)
        self.table = table
        self.cluster = cluster_name
        # Claims read under the bare cluster name (written before the shards): moved on their next update.
        self._legacy: set[str] = set()

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._db.calls)

    def _key(self, item_id: str, *, partition: str | None = None) -> dict[str, Any]:
        return {PARTITION_KEY: {"S": partition or self.cluster}, SORT_KEY: {"S": item_id}}

    def _claim_key(self, claim_id: str, *, legacy: bool = False) -> dict[str, Any]:
        partition = self.cluster if legacy else f"{self.cluster}#{claim_shard(claim_id):02d}"
        return self._key(_CLAIM + claim_id, partition=partition)

    def _item(self, claim: Claim) -> dict[str, Any]:
        return {**self._claim_key(claim.claim_id), "doc": {"S": claim.to_json()},
                "expiresAt": {"N": str(int(claim.created_at + CLAIM_TTL_SECONDS))}}

    def _query(self, partition: str) -> list[tuple[Claim, bool]]:
        out = []
        for page in self._db.pages("query", TableName=self.table, ConsistentRead=True,
                                   KeyConditionExpression="#c = :c AND begins_with(#i, :p)",
                                   ExpressionAttributeNames={"#c": PARTITION_KEY, "#i": SORT_KEY},
                                   ExpressionAttributeValues={":c": {"S": partition}, ":p": {"S": _CLAIM}}):
            for item in page.get("Items", ()):
                try:
                    out.append((Claim.from_json(item["doc"]["S"]), partition == self.cluster))
                except (KeyError, ValueError) as exc:  # never fail a pass on one bad item; say which
                    log.error("ignoring stored node claim %s: %s", item.get("id", {}).get("S", "?"), exc)
        return out

    def claims(self) -> list[Claim]:
        with ThreadPoolExecutor(max_workers=CLAIM_SHARDS + 1, thread_name_prefix="claims-read") as pool:
            found = [c for part in pool.map(self._query, shard_keys(self.cluster)) for c in part]
        self._legacy = {c.claim_id for c, legacy in found if legacy}
        # An id under both keys (a move cut short): the shard's copy is the newer one.
        newest: dict[str, Claim] = {}
        for claim, legacy in found:
            if not legacy or claim.claim_id not in newest:
                newest[claim.claim_id] = claim
        return list(newest.values())

    def create(self, claims: Sequence[Claim]) -> None:
        for chunk in _chunks(list(claims), _TRANSACTION_ITEMS):
            self._db("transact_write_items", TransactItems=[
                {"Put": {"TableName": self.table, "Item": self._item(c),
                         "ConditionExpression": "attribute_not_exists(#i)",
                         "ExpressionAttributeNames": {"#i": "id"}}} for c in chunk])

    def update(self, claims: Sequence[Claim]) -> None:
        """Rewrite claims in their shards; a claim still under the legacy key moves (written to its shard
        first, then removed from the old key: a failure in between leaves it readable twice, never lost;
        ``claims`` keeps the shard's copy of an id found under both)."""
        self._batch([{"PutRequest": {"Item": self._item(c)}} for c in claims])
        moved = sorted(c.claim_id for c in claims if c.claim_id in self._legacy)
        if moved:
            self._batch([{"DeleteRequest": {"Key": self._claim_key(cid, legacy=True)}} for cid in moved])
            self._legacy.difference_update(moved)

    def delete(self, claim_ids: Collection[str]) -> None:
        ids = sorted(claim_ids)
        self._batch([{"DeleteRequest": {"Key": self._claim_key(cid)}} for cid in ids]
                    + [{"DeleteRequest": {"Key": self._claim_key(cid, legacy=True)}} for cid in ids
                       if cid in self._legacy])
        self._legacy.difference_update(ids)

    def _batch(self, requests: list[dict[str, Any]]) -> None:
        for chunk in _chunks(requests, _BATCH_ITEMS):
            todo = list(chunk)
            for _ in range(_BATCH_ROUNDS):
                resp = self._db("batch_write_item", RequestItems={self.table: todo})
                todo = list((resp.get("UnprocessedItems") or {}).get(self.table, ()))
                if not todo:
                    break
            else:
                raise CloudError(f"BatchWriteItem: {len(todo)} item(s) still unprocessed after "
                                 f"{_BATCH_ROUNDS} rounds (table {self.table} throttled)",
                                 operation="BatchWriteItem", code="ProvisionedThroughputExceededException")

    def acquire_lease(self, holder: str, *, now: float, seconds: float) -> bool:
        until = now + seconds
        try:
            self._db("put_item", TableName=self.table, expected_errors=("ConditionalCheckFailedException",),
                     Item={**self._key(_LEASE), "holder": {"S": holder}, "until": {"N": f"{until:.3f}"},
                           "expiresAt": {"N": str(int(until) + 60)}},
                     ConditionExpression="attribute_not_exists(#i) OR #h = :h OR #u < :now",
                     ExpressionAttributeNames={"#i": "id", "#h": "holder", "#u": "until"},
                     ExpressionAttributeValues={":h": {"S": holder}, ":now": {"N": f"{now:.3f}"}})
        except CloudError as exc:
            if exc.code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def release_lease(self, holder: str) -> None:
        try:
            self._db("delete_item", TableName=self.table, Key=self._key(_LEASE),
                     expected_errors=("ConditionalCheckFailedException",),
                     ConditionExpression="#h = :h", ExpressionAttributeNames={"#h": "holder"},
                     ExpressionAttributeValues={":h": {"S": holder}})
        except CloudError as exc:
            if exc.code != "ConditionalCheckFailedException":
                raise
