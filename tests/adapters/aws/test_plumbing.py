"""Client plumbing: bounded adaptive retries, failures logged with the request id, no calls at build."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.utils import parse_timestamp

from autoscaler.adapters.aws._calls import Caller, client_config, fast_timestamp
from autoscaler.adapters.aws.claims import create_table
from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.app.ports import CloudError
from tests.adapters.aws.helpers import CLUSTER, REGION


def test_retries_are_adaptive_and_bounded() -> None:
    cfg = client_config(max_attempts=4)
    assert cfg.retries == {"mode": "adaptive", "max_attempts": 4}


def test_requests_are_checked_by_the_service_not_by_botocore_and_a_burst_keeps_its_connections(aws: None) -> None:
    # botocore's own check of every request was ~30% of a 50k-pod burst's launch CPU (issue 34): the service
    # checks a request anyway, and a bad one still comes back as the port's typed error, naming what was wrong
    from autoscaler.app.provisioner import LAUNCH_THREADS

    cfg = client_config()
    assert cfg.parameter_validation is False and cfg.max_pool_connections >= LAUNCH_THREADS
    dynamodb = boto3.client("dynamodb", region_name=REGION, config=cfg)
    create_table(dynamodb, "claims")
    with pytest.raises(CloudError) as raised:  # an item without its sort key
        Caller(dynamodb)("put_item", TableName="claims", Item={"cluster": {"S": "prod"}})
    assert raised.value.operation == "put_item" and raised.value.code == "ValidationException"


def test_failures_are_logged_with_request_id(ec2: Any, caplog: pytest.LogCaptureFixture) -> None:
    call = Caller(ec2)
    with pytest.raises(CloudError) as raised:
        call("describe_instances", InstanceIds=["i-0000000000000dead"])
    # The SDK's exception never crosses the port: a typed error naming the operation and AWS's code.
    assert raised.value.operation == "describe_instances" and raised.value.code.startswith("InvalidInstanceID")
    assert raised.value.request_id and not raised.value.retryable
    [record] = [r for r in caplog.records if r.name == "autoscaler.adapters.aws"]
    assert "describe_instances" in record.getMessage() and "InvalidInstanceID" in record.getMessage()
    assert getattr(record, "request_id", None)
    assert call.calls["describe_instances"] == 1


def test_expected_errors_are_not_logged(ec2: Any, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(CloudError):
        Caller(ec2)("describe_instances", InstanceIds=["i-0000000000000dead"],
                    expected_errors=("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"))
    assert not [r for r in caplog.records if r.name == "autoscaler.adapters.aws"]


def test_from_session_makes_no_call_until_used(aws: None) -> None:
    cloud = AwsCloud.from_session(boto3.Session(region_name=REGION), region=REGION, cluster=CLUSTER)
    assert cloud.calls == {}
    assert cloud.fleet._ec2.client.meta.config.retries["mode"] == "adaptive"
    assert cloud.prices._pricing.client.meta.region_name == "us-east-1"


@pytest.mark.parametrize("value", [
    "2026-11-23T23:57:50.000Z", "2026-11-23T23:57:50Z", "2026-11-23T23:57:50.123456+02:00",
    "2026-11-23T23:57:50", "2026-11-23", 1700000000, 1700000000.5, "1700000000",
    "Thu, 23 Nov 2026 23:57:50 GMT",
])
def test_fast_timestamps_read_every_shape_as_botocore_does(value: Any) -> None:
    # Given a timestamp as an AWS protocol sends it / Then the fast parser's time is botocore's
    assert fast_timestamp(value) == parse_timestamp(value)


def test_clients_from_a_session_parse_timestamps_without_dateutil(ec2: Any, network: Any) -> None:
    # Given an instance in moto and the adapter's clients built from a session
    ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=next(iter(network.subnets.values())))
    cloud = AwsCloud.from_session(boto3.Session(region_name=REGION), region=REGION, cluster=CLUSTER)
    # When DescribeInstances answers / Then its LaunchTime came through the standard library's parser (its
    # zone is datetime's UTC, where dateutil's would be tzutc()) and is the right time
    [reservation] = cloud.fleet._ec2.client.describe_instances()["Reservations"]
    launched = reservation["Instances"][0]["LaunchTime"]
    assert launched.tzinfo is UTC
    assert abs(launched - datetime.now(UTC)) < timedelta(minutes=5)
