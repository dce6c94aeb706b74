"""``DynamoClaimStore`` on moto's DynamoDB: conditional creates, strongly consistent reads past one page,
updates, deletes and the launch lease."""

from __future__ import annotations

import logging
from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.claims import CLAIM_SHARDS, DynamoClaimStore, create_table
from autoscaler.app.ports import CloudError
from autoscaler.domain.claims import Claim
from tests.adapters.aws.helpers import REGION

TABLE = "claims"


@pytest.fixture
def db(aws: None) -> Any:
    client = boto3.client("dynamodb", region_name=REGION)
    create_table(client, TABLE)
    return client


def claim(cid: str, **kw: Any) -> Claim:
    base: dict[str, Any] = {"claim_id": cid, "group": cid, "group_size": 1, "node_pool": "default",
                            "node_class": "default", "capacity_types": ("spot",), "instance_types": ("m5.large",),
                            "zones": (), "pods": ("ns/p",), "created_at": 1_800_000_000.0}
    return Claim(**{**base, **kw})


def test_claims_are_kept_per_cluster(db: Any) -> None:
    # The rest of the ClaimStore contract runs against this adapter and its fake in
    # tests/adapters/contract/test_claim_store.py.
    store = DynamoClaimStore(db, table=TABLE, cluster_name="demo")
    other = DynamoClaimStore(db, table=TABLE, cluster_name="other")
    store.create([claim("a"), claim("b")])
    other.create([claim("a")])
    assert sorted(c.claim_id for c in store.claims()) == ["a", "b"] and len(other.claims()) == 1


def test_more_claims_than_one_page_or_one_transaction(db: Any) -> None:
    store = DynamoClaimStore(db, table=TABLE, cluster_name="demo")
    pods = tuple(f"namespace-{i:04d}/pod-with-a-long-name-{i:05d}" for i in range(300))
    store.create([claim(f"c{i:04d}", pods=pods) for i in range(250)])  # > 100 per transaction, > 1 MB in total
    assert len(store.claims()) == 250 and store.calls["query"] >= 2
    store.delete({f"c{i:04d}" for i in range(250)})
    assert store.claims() == []


def test_a_malformed_item_is_skipped_and_named(db: Any, caplog: pytest.LogCaptureFixture) -> None:
    store = DynamoClaimStore(db, table=TABLE, cluster_name="demo")
    store.create([claim("good")])
    db.put_item(TableName=TABLE, Item={"cluster": {"S": "demo"}, "id": {"S": "claim#bad"}, "doc": {"S": "{"}})
    with caplog.at_level(logging.ERROR):
        assert [c.claim_id for c in store.claims()] == ["good"]
    assert "claim#bad" in caplog.text


def test_an_unreachable_table_is_a_typed_error(aws: None) -> None:
    store = DynamoClaimStore(boto3.client("dynamodb", region_name=REGION), table="missing", cluster_name="demo")
    with pytest.raises(CloudError) as err:
        store.claims()
    assert err.value.code == "ResourceNotFoundException"
    with pytest.raises(CloudError):
        store.acquire_lease("p", now=1.0, seconds=1)


def test_claims_spread_over_the_shards_and_a_burst_is_not_throttled(db: Any) -> None:
    """GIVEN moto with DynamoDB's per-partition write limit (1,000 units a second per partition-key value)
    WHEN 2,000 claims of ~1.5 KB are created at once (6,000 transactional units: six seconds of one key)
    THEN no write is refused, every shard holds some and none more than its share, and all read back."""
    from simulator.moto_strict import DynamoThrottle, throttle_dynamodb_partitions

    model, undo = throttle_dynamodb_partitions(DynamoThrottle(clock=lambda: 0.0))  # one instant: the worst case
    try:
        store = DynamoClaimStore(db, table=TABLE, cluster_name="demo")
        pods = tuple(f"default/app-{i:03d}-7c9d8f6b5d-x{i:04d}" for i in range(35))
        burst = [claim(f"burst-{i:05d}", pods=pods) for i in range(2000)]
        store.create(burst)
        stats = model.stats()
        assert stats["throttledWrites"] == 0 and stats["partitions"] == CLAIM_SHARDS
        assert stats["wcuCharged"] > 5000 and stats["maxWcuPerPartition"] <= 1000
        assert len(store.claims()) == 2000
    finally:
        undo()


def test_the_throttle_model_refuses_one_hot_key_as_dynamodb_does(db: Any) -> None:
    """The same burst under one partition-key value is refused (the model can fail the test above)."""
    from simulator.moto_strict import DynamoThrottle, item_wcu, throttle_dynamodb_partitions

    model, undo = throttle_dynamodb_partitions(DynamoThrottle(clock=lambda: 0.0))
    try:
        big = "x" * 1500
        items = [{"Put": {"TableName": TABLE, "Item": {"cluster": {"S": "demo"}, "id": {"S": f"claim#{i}"},
                                                        "doc": {"S": big}}}} for i in range(100)]
        db.transact_write_items(TransactItems=items[:100])  # 100 x 2 KB x 2 = 400 units: fits
        db.transact_write_items(TransactItems=[{"Put": {**i["Put"], "Item": {**i["Put"]["Item"], "id": {
            "S": f"claim#again-{n}"}}}} for n, i in enumerate(items)])  # 400 more ...
        with pytest.raises(db.exceptions.TransactionCanceledException) as cancelled:
            db.transact_write_items(TransactItems=[{"Put": {**i["Put"], "Item": {**i["Put"]["Item"], "id": {
                "S": f"claim#third-{n}"}}}} for n, i in enumerate(items)])  # ... and 400 more: over 1,000
        assert "ThrottlingError" in str(cancelled.value)
        with pytest.raises(db.exceptions.ProvisionedThroughputExceededException):
            db.put_item(TableName=TABLE, Item={"cluster": {"S": "demo"}, "id": {"S": "one-more"},
                                               "doc": {"S": big * 200}})  # 293 units: past the 800 spent
        wide = [{"cluster": {"S": "other"}, "id": {"S": f"b{i}"}, "doc": {"S": big * 50}} for i in range(25)]
        answer = db.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": i}} for i in wide]})
        fit = 1000 // item_wcu(wide[0])  # the other key's second takes this many; the rest come back
        assert len(answer["UnprocessedItems"][TABLE]) == 25 - fit
        assert model.stats()["throttledWrites"] >= 100 + 1 + 25 - fit  # the put is refused on each retry too
    finally:
        undo()


def test_a_retried_transaction_with_its_token_is_idempotent_as_in_dynamodb(db: Any) -> None:
    """botocore sends one ClientRequestToken per TransactWriteItems call and keeps it across its retries; DynamoDB
    answers a retry of an applied transaction with success. The strict moto does too (a retry after a lost answer
    under load had refused a burst's claims in the benchmark)."""
    from simulator.moto_strict import DynamoThrottle, throttle_dynamodb_partitions

    _, undo = throttle_dynamodb_partitions(DynamoThrottle(clock=lambda: 0.0))
    try:
        put = [{"Put": {"TableName": TABLE, "Item": {"cluster": {"S": "demo"}, "id": {"S": "claim#t"}},
                        "ConditionExpression": "attribute_not_exists(#i)", "ExpressionAttributeNames": {"#i": "id"}}}]
        db.transact_write_items(TransactItems=put, ClientRequestToken="same-call")
        db.transact_write_items(TransactItems=put, ClientRequestToken="same-call")  # the retry: success
        with pytest.raises(db.exceptions.TransactionCanceledException):
            db.transact_write_items(TransactItems=put, ClientRequestToken="another-call")
    finally:
        undo()


def test_claims_written_before_the_shards_are_read_moved_and_deleted(db: Any) -> None:
    store = DynamoClaimStore(db, table=TABLE, cluster_name="demo")
    for old in (claim("old-1"), claim("old-2"), claim("old-3")):  # as the unsharded store wrote them
        db.put_item(TableName=TABLE, Item={"cluster": {"S": "demo"}, "id": {"S": f"claim#{old.claim_id}"},
                                           "doc": {"S": old.to_json()}, "expiresAt": {"N": "1900000000"}})
    store.create([claim("new")])
    assert sorted(c.claim_id for c in store.claims()) == ["new", "old-1", "old-2", "old-3"]
    done = claim("old-1").launched(instance_id="i-1", instance_type="m5.large", zone="us-east-1a",
                                   capacity_type="spot")
    store.update([done])
    store.delete({"old-2"})
    legacy = db.query(TableName=TABLE, KeyConditionExpression="#c = :c AND begins_with(#i, :p)",
                      ExpressionAttributeNames={"#c": "cluster", "#i": "id"},
                      ExpressionAttributeValues={":c": {"S": "demo"}, ":p": {"S": "claim#"}})["Items"]
    assert [i["id"]["S"] for i in legacy] == ["claim#old-3"]  # moved and deleted ones are gone from the old key
    fresh = DynamoClaimStore(db, table=TABLE, cluster_name="demo")  # another container
    assert sorted((c.claim_id, c.state) for c in fresh.claims()) == [("new", "launching"), ("old-1", "launched"),
                                                                     ("old-3", "launching")]
    # a move cut short (written to the shard, not yet removed from the old key) reads once, the shard's copy
    db.put_item(TableName=TABLE, Item={"cluster": {"S": "demo"}, "id": {"S": "claim#old-1"},
                                       "doc": {"S": claim("old-1").to_json()}})
    assert [c.state for c in fresh.claims() if c.claim_id == "old-1"] == ["launched"]
    fresh.delete({"old-1"})
    assert sorted(c.claim_id for c in DynamoClaimStore(db, table=TABLE, cluster_name="demo").claims()) == [
        "new", "old-3"]
