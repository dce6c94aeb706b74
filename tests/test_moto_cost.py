"""tests/moto_cost.py's savings are in force in the test process and change no answer: a catalogue answer
served again is the one moto serialises afresh, and a cancelled transaction still leaves every table as it
was before it (moto's rollback restores the one backup the saving keeps)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import botocore.parsers
import pytest
from botocore.utils import parse_timestamp
from moto.backends import get_backend
from moto.core.responses import ActionResult
from moto.dynamodb import models as dynamodb_models
from moto.ec2.models.core import TaggedEC2Resource

from autoscaler.adapters.aws._calls import fast_timestamp
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
    assert TaggedEC2Resource.get_tags.__module__ == "tests.moto_cost"
    assert botocore.parsers.DEFAULT_TIMESTAMP_PARSER is fast_timestamp


def test_a_resources_tags_are_the_ones_moto_finds_by_scanning_every_resource(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24")["Subnet"]["SubnetId"] for i in range(3)]
    ec2.create_tags(Resources=subnets[:2], Tags=[{"Key": "team", "Value": "a"}, {"Key": "tier", "Value": "web"}])
    ec2.create_tags(Resources=[subnets[1]], Tags=[{"Key": "team", "Value": "b"}, {"Key": "zz", "Value": ""}])
    ec2.create_tags(Resources=[vpc], Tags=[{"Key": "team", "Value": "a"}])
    described = ec2.describe_subnets(SubnetIds=subnets)["Subnets"]
    filtered = ec2.describe_subnets(Filters=[{"Name": "tag:team", "Values": ["a"]}])["Subnets"]
    scanning = TaggedEC2Resource.get_tags.__wrapped__
    backend = get_backend("ec2")["123456789012"][REGION]
    for subnet_id in [*subnets, vpc]:
        resource = backend.get_subnet(subnet_id) if subnet_id.startswith("subnet-") else backend.get_vpc(subnet_id)
        assert resource.get_tags() == scanning(resource)
    assert {s["SubnetId"]: {t["Key"]: t["Value"] for t in s.get("Tags", [])} for s in described} == {
        subnets[0]: {"team": "a", "tier": "web"}, subnets[1]: {"team": "b", "tier": "web", "zz": ""}, subnets[2]: {}}
    assert [s["SubnetId"] for s in filtered] == [subnets[0]]


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


@pytest.mark.parametrize("value", [
    "2006-01-02T15:04:05.999999999Z",  # moto's spot price stamp: nanoseconds
    "2026-11-26T14:08:00.000Z", "2026-11-26T14:08:00Z", "2026-11-26T14:08:00+00:00", "2026-11-26T16:08:00+02:00",
    "2026-11-26T14:08:00",  # no zone: botocore reads it as UTC
    "Thu, 26 Nov 2026 14:08:00 GMT", "1795702080", "1795702080.5",  # RFC 822 and epoch seconds
])
def test_a_timestamp_parses_to_the_instant_botocores_own_parser_gives(value: str) -> None:
    parsed, botocores = fast_timestamp(value), parse_timestamp(value)
    assert parsed == botocores and parsed.utcoffset() == botocores.utcoffset()


def test_a_client_parses_moto_answers_with_the_functions_parser(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = {"InstanceTypes": ["m5.large"], "Filters": [{"Name": "availability-zone", "Values": ["us-east-1a"]}]}
    parsed = boto3.client("ec2", region_name=REGION).describe_spot_price_history(**asked)["SpotPriceHistory"]
    monkeypatch.setattr(botocore.parsers, "DEFAULT_TIMESTAMP_PARSER", parse_timestamp)
    botocores = boto3.client("ec2", region_name=REGION).describe_spot_price_history(**asked)["SpotPriceHistory"]
    assert len(parsed) == 1 and parsed == botocores
    assert parsed[0]["Timestamp"].tzinfo is not None


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
