"""``DynamoClaimStore``: node claims and the launch lease in one DynamoDB table (``ClaimStore``).

Why DynamoDB and not objects in the cluster: a claim must be written before every CreateFleet and read
by every pass with strong consistency, and the Kubernetes API calls of a pass are budgeted (a 50k-pod
burst must stay within a few hundred requests); one Query reads every claim of a cluster, and a
conditional write makes both the claim (never reused) and the lease (one launching pass) safe.

Table layout (the CDK stack creates it, on-demand billing, TTL on ``expiresAt``):
``cluster`` (partition key) = the cluster name; ``id`` (sort key) = ``claim#<claim id>`` or ``lease``;
``doc`` = the claim as JSON (``Claim.to_json``); ``holder``/``until`` on the lease item.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
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

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._db.calls)

    def _key(self, item_id: str) -> dict[str, Any]:
        return {"cluster": {"S": self.cluster}, "id": {"S": item_id}}

    def _item(self, claim: Claim) -> dict[str, Any]:
        return {**self._key(_CLAIM + claim.claim_id), "doc": {"S": claim.to_json()},
                "expiresAt": {"N": str(int(claim.created_at + CLAIM_TTL_SECONDS))}}

    def claims(self) -> list[Claim]:
        out = []
        for page in self._db.pages("query", TableName=self.table, ConsistentRead=True,
                                   KeyConditionExpression="#c = :c AND begins_with(#i, :p)",
                                   ExpressionAttributeNames={"#c": "cluster", "#i": "id"},
                                   ExpressionAttributeValues={":c": {"S": self.cluster}, ":p": {"S": _CLAIM}}):
            for item in page.get("Items", ()):
                try:
                    out.append(Claim.from_json(item["doc"]["S"]))
                except (KeyError, ValueError) as exc:  # never fail a pass on one bad item; say which
                    log.error("ignoring stored node claim %s: %s", item.get("id", {}).get("S", "?"), exc)
        return out

    def create(self, claims: Sequence[Claim]) -> None:
        for chunk in _chunks(list(claims), _TRANSACTION_ITEMS):
            self._db("transact_write_items", TransactItems=[
                {"Put": {"TableName": self.table, "Item": self._item(c),
                         "ConditionExpression": "attribute_not_exists(#i)",
                         "ExpressionAttributeNames": {"#i": "id"}}} for c in chunk])

    def update(self, claims: Sequence[Claim]) -> None:
        self._batch([{"PutRequest": {"Item": self._item(c)}} for c in claims])

    def delete(self, claim_ids: Collection[str]) -> None:
        self._batch([{"DeleteRequest": {"Key": self._key(_CLAIM + cid)}} for cid in sorted(claim_ids)])

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
