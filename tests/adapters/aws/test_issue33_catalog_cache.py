"""Issue 33 item 21: idle passes (every 10 minutes) do not re-read the instance catalogue: it is kept an
hour, so an idle pass costs no DescribeInstanceTypes parse."""

from __future__ import annotations

from typing import Any

import boto3

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.clock import ManualClock
from tests.adapters.aws.helpers import CLUSTER, REGION


def test_item21_the_catalogue_is_kept_across_idle_passes_and_refreshed_hourly(ec2: Any, ssm: Any, iam: Any) -> None:
    clock = ManualClock()
    cloud = AwsCloud(ec2=ec2, ssm=ssm, iam=iam, pricing=boto3.client("pricing", region_name=REGION),
                     region=REGION, cluster=CLUSTER, clock=clock)
    cloud.instance_types()
    first = cloud.catalog.calls.get("describe_instance_types", 0)
    assert first >= 1
    # Given the safety pass every 10 minutes for the rest of the hour
    for _ in range(5):
        clock.advance(600)
        cloud.instance_types()
        cloud.catalog.offered()
    # Then the catalogue was read once
    assert cloud.catalog.calls.get("describe_instance_types", 0) == first
    # And an hour after it was read, the next pass reads it again (new types, retired ones)
    clock.advance(600)
    cloud.instance_types()
    assert cloud.catalog.calls.get("describe_instance_types", 0) == 2 * first
