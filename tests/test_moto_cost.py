"""tests/moto_cost.py's savings are in force in the test process and change no answer: a catalogue answer
served again is the one moto serialises afresh, and a cancelled transaction still leaves every table as it
was before it (moto's rollback restores the one backup the saving keeps)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.core.responses import ActionResult
from moto.dynamodb import models as dynamodb_models

from tests.moto_env import moto_environment

REGION = "us-east-1"
SPOT = {"ProductDescriptions": ["Linux/UNIX"], "InstanceTypes": ["m5.large", "c5.xlarge"]}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with moto_environment(monkeypatch, REGION):
        yield


def test_the_savings_are_installed_in_the_test_process() -> None:
    assert ActionResult.execute_result.__name__ == "execute_result"
    assert ActionResult.execute_result.__module__ == "tests.moto_cost"
    assert type(dynamodb_models.copy).__name__ == "_TableBackups"


def test_a_catalogue_answer_served_again_is_what_moto_serialises_afresh(aws: None,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    first, again = ec2.describe_spot_price_history(**SPOT), ec2.describe_spot_price_history(**SPOT)
    other = ec2.describe_spot_price_history(ProductDescriptions=["Linux/UNIX"], InstanceTypes=["m5.large"])
    monkeypatch.setattr(ActionResult, "execute_result", ActionResult.execute_result.__wrapped__)
    fresh = ec2.describe_spot_price_history(**SPOT)
    for answer in (first, again, fresh):
        answer.pop("ResponseMetadata")
    other.pop("ResponseMetadata")
    assert first == again == fresh
    assert {p["InstanceType"] for p in first["SpotPriceHistory"]} == {"m5.large", "c5.xlarge"}
    assert other != first and {p["InstanceType"] for p in other["SpotPriceHistory"]} == {"m5.large"}


def _items(db: Any) -> list[tuple[str, str]]:
    return sorted((i["id"]["S"], i["doc"]["S"]) for i in db.scan(TableName="t")["Items"])


def test_a_cancelled_transaction_leaves_the_table_as_it_was(aws: None) -> None:
    db = boto3.client("dynamodb", region_name=REGION)
    db.create_table(TableName="t", KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                    AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    for i in range(5):
        db.put_item(TableName="t", Item={"id": {"S": f"k{i}"}, "doc": {"S": "before"}})
    before = _items(db)
    writes: list[dict[str, Any]] = [{"Put": {"TableName": "t", "Item": {"id": {"S": f"k{i}"}, "doc": {"S": "after"}}}}
                                    for i in range(5)]
    writes += [{"Put": {"TableName": "t", "Item": {"id": {"S": "new"}, "doc": {"S": "after"}}}},
               {"Put": {"TableName": "t", "Item": {"id": {"S": "k0x"}, "doc": {"S": "after"}},
                        "ConditionExpression": "attribute_exists(id)"}}]  # fails last, after six writes
    with pytest.raises(db.exceptions.TransactionCanceledException):
        db.transact_write_items(TransactItems=writes)
    assert _items(db) == before
    db.transact_write_items(TransactItems=writes[:6])
    assert _items(db) == sorted([(f"k{i}", "after") for i in range(5)] + [("new", "after")])
