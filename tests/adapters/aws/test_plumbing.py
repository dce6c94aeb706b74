"""Client plumbing: bounded adaptive retries, failures logged with the request id, no calls at build."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws._calls import Caller, client_config
from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.app.ports import CloudError
from tests.adapters.aws.helpers import CLUSTER, REGION


def test_retries_are_adaptive_and_bounded() -> None:
    cfg = client_config(max_attempts=4)
    assert cfg.retries == {"mode": "adaptive", "max_attempts": 4}


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
