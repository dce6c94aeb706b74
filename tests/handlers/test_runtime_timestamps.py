"""The runtime's AWS clients read API timestamps with ``datetime.fromisoformat`` (handlers/runtime.py): the
same values as botocore's dateutil parser, at a fraction of the CPU on a woken pass's DescribeInstances."""

from __future__ import annotations

from datetime import UTC, datetime, timezone
from typing import Any

import boto3
import pytest
from botocore.utils import parse_timestamp

from autoscaler.handlers.runtime import _fast_timestamps, _iso_timestamp
from tests.moto_env import moto_environment


@pytest.mark.parametrize("value", [
    "2026-11-24T00:00:00.000Z", "2026-11-24T00:00:00Z", "2026-11-24T01:30:00+01:30", "2026-11-24T00:00:00.123456Z",
    "2026-11-24T00:00:00",  # no zone: left to botocore's parser
    1795000000, "1795000000",  # epoch seconds (JSON protocols)
    "Tue, 24 Nov 2026 00:00:00 GMT",  # RFC 822 (S3 headers)
])
def test_iso_timestamps_read_as_botocore_reads_them(value: Any) -> None:
    # Given a timestamp as an AWS API may send it / Then it reads as botocore's own parser reads it
    assert _iso_timestamp(value) == parse_timestamp(value)


def test_describe_instances_times_go_through_the_fast_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    with moto_environment(monkeypatch, "us-east-1"):
        # Given an instance, and a session prepared as build_runtime prepares it
        session = boto3.Session(region_name="us-east-1")
        _fast_timestamps(session)
        ec2 = session.client("ec2")
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.large")
        # When its LaunchTime is read
        launched = ec2.describe_instances()["Reservations"][0]["Instances"][0]["LaunchTime"]
        # Then it is a zone-aware datetime from fromisoformat (dateutil's would carry tzutc), near now
        assert isinstance(launched, datetime) and type(launched.tzinfo) is timezone
        assert abs(launched.timestamp() - datetime.now(UTC).timestamp()) < 600
