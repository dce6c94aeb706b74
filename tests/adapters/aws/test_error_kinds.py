"""AWS failures reach the services as the ``CloudError`` class they branch on (``adapters/aws/_calls.py``):
throttled, insufficient capacity, not found, unauthorized, uncertain outcome, or plain ``CloudError``."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from autoscaler.adapters.aws._calls import Caller
from autoscaler.adapters.aws.instances import Instances
from autoscaler.app.ports import (
    CloudError,
    CloudNotFoundError,
    InsufficientCapacityError,
    ThrottledError,
    UnauthorizedError,
    UncertainOutcomeError,
)
from tests.adapters.aws.helpers import CLUSTER, REGION


@pytest.mark.parametrize(("code", "status", "kind"), [
    ("RequestLimitExceeded", 503, ThrottledError),  # EC2 throttles with 503: never acted on
    ("Throttling", 400, ThrottledError),
    ("SomethingNew", 429, ThrottledError),
    ("InsufficientInstanceCapacity", 500, InsufficientCapacityError),
    ("UnfulfillableCapacity", 400, InsufficientCapacityError),
    ("UnauthorizedOperation", 403, UnauthorizedError),
    ("AccessDeniedException", 400, UnauthorizedError),
    ("InvalidInstanceID.NotFound", 400, CloudNotFoundError),
    ("InvalidLaunchTemplateName.NotFoundException", 400, CloudNotFoundError),
    ("NoSuchEntity", 404, CloudNotFoundError),
    ("ParameterNotFound", 400, CloudNotFoundError),
    ("InternalError", 500, UncertainOutcomeError),
    ("ServiceUnavailable", 503, UncertainOutcomeError),
    ("InvalidParameterValue", 400, CloudError),
])
def test_an_aws_error_code_becomes_the_error_class_the_product_branches_on(code: str, status: int,
                                                                           kind: type[CloudError]) -> None:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_regions", service_error_code=code, http_status_code=status)
        with pytest.raises(CloudError) as raised:
            Caller(ec2)("describe_regions")
    assert type(raised.value) is kind
    assert raised.value.code == code and raised.value.status == status and raised.value.operation == "describe_regions"


def test_a_call_without_an_answer_is_an_uncertain_outcome() -> None:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")

    def unreachable(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://ec2.example")

    ec2.meta.events.register("before-send.ec2.DescribeRegions", unreachable)
    with pytest.raises(UncertainOutcomeError) as raised:
        Caller(ec2)("describe_regions")
    assert raised.value.code == "EndpointConnectionError" and raised.value.status == 0 and raised.value.retryable


def test_an_unknown_instance_is_not_found_on_moto(ec2: Any) -> None:
    # The real service's answer (moto), not a stub: the adapter sees CloudNotFoundError and leaves it out.
    with pytest.raises(CloudNotFoundError):
        Caller(ec2)("describe_instances", InstanceIds=["i-0000000000000dead"])
    assert Instances(ec2, cluster_name=CLUSTER).describe(["i-0000000000000dead"]) == []
