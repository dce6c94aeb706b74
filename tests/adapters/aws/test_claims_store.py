"""``DynamoClaimStore`` on moto's DynamoDB: conditional creates, strongly consistent reads past one page,
updates, deletes and the launch lease."""

from __future__ import annotations

import logging
from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.claims import DynamoClaimStore, create_table
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
