"""Issue 33 item 10 at the adapter: a throttled CreateFleet is retried with backoff and jitter within a
bound, under the same client token, never taken for an uncertain outcome (item 11: tests/e2e)."""

from __future__ import annotations

from typing import Any

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.aws.fleet import client_token
from autoscaler.adapters.clock import ManualClock
from autoscaler.app.launcher import new_claim_id
from autoscaler.domain.fleet import FleetRequest
from tests.adapters.aws.helpers import CLUSTER, node_class


class _Http:
    def __init__(self, status: int) -> None:
        self.status_code, self.headers, self.content = status, {}, b""


def _throttle(ec2: Any, times: int, sent: list[str]) -> None:
    """EC2 answering CreateFleet with RequestLimitExceeded (HTTP 503) ``times`` times, after botocore's own
    retries (the answer comes at botocore's before-call hook, past its retry loop)."""
    left = [times]

    def answer(params: dict[str, Any], **_: Any) -> Any:
        body = params.get("body") or {}
        sent.append(str(body.get("ClientToken") if isinstance(body, dict) else body))
        if left[0] <= 0:
            return None
        left[0] -= 1
        return _Http(503), {"Error": {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."},
                            "ResponseMetadata": {"HTTPStatusCode": 503}}
    ec2.meta.events.register("before-call.ec2.CreateFleet", answer)


def _request() -> FleetRequest:
    return FleetRequest(claim_id=new_claim_id("general"), cluster_name=CLUSTER.name, node_pool="general",
                        node_class=node_class(), capacity_types=("on-demand",), instance_types=("m5.large",),
                        zones=("us-east-1a",))


def test_item10_a_throttled_create_fleet_is_retried_with_backoff_not_treated_as_uncertain(
        ec2: Any, cloud: AwsCloud) -> None:
    # Given EC2 throttles the first two CreateFleet calls
    sent: list[str] = []
    _throttle(ec2, 2, sent)
    clock = cloud.clock
    assert isinstance(clock, ManualClock)
    start = clock.monotonic()
    request = _request()
    # When the launch runs
    result = cloud.launch(request)
    # Then it launched on the third call, with the same token each time (EC2 never acted on a throttled call)
    assert result.complete and not result.uncertain, result.errors
    assert len(sent) == 3 and set(sent) == {client_token(request.claim_id, "on-demand", 0)}
    # after waiting (virtual time) between the calls, within the bound
    waited = clock.monotonic() - start
    assert 0 < waited <= cloud.fleet.throttle_retry_seconds


def test_item10_throttled_past_the_bound_is_a_failure_ec2_did_not_act_on(ec2: Any, cloud: AwsCloud) -> None:
    sent: list[str] = []
    _throttle(ec2, 1000, sent)
    result = cloud.launch(_request())
    assert not result.launched and not result.uncertain
    assert result.errors and all(e.code == "RequestLimitExceeded" and not e.uncertain for e in result.errors)
    assert 1 < len(sent) < 20

