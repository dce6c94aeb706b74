"""The replacement request to the provisioner: an asynchronous Invoke with the cross-function payload,
checked with botocore's Stubber (the exact request parameters botocore would send)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from autoscaler.adapters.aws.replacement import LambdaReplacementRequester, replacement_payload
from autoscaler.app.ports import CloudError


def _client() -> object:
    return boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def test_request_is_an_async_invoke_with_the_contract_payload() -> None:
    client = _client()
    requester = LambdaReplacementRequester(client, function_name="prov")
    payload = {"source": "interruption", "kind": "replacement", "nodes": ["n1", "n2"],
               "unavailable": [["m5.large", "us-east-1a", "spot"]], "eventId": "ev-1"}
    with Stubber(client) as stub:
        stub.add_response("invoke", {"StatusCode": 202}, expected_params={
            "FunctionName": "prov", "InvocationType": "Event", "Payload": json.dumps(payload).encode()})
        assert requester.request_replacement(source="interruption", nodes=["n1", "n2"],
                                             unavailable=[("m5.large", "us-east-1a", "spot")], event_id="ev-1")
        stub.assert_no_pending_responses()
    assert requester.calls == {"invoke": 1}
    assert replacement_payload(source="interruption", nodes=("n1", "n2"),
                               unavailable=[("m5.large", "us-east-1a", "spot")], event_id="ev-1") == payload


def test_without_a_provisioner_nothing_is_sent() -> None:
    client = _client()
    with Stubber(client) as stub:  # any call would fail: no response is queued
        assert not LambdaReplacementRequester(client, function_name=None).request_replacement(
            source="interruption", nodes=["n1"], unavailable=[], event_id="ev")
        stub.assert_no_pending_responses()


def test_a_failed_invoke_raises_so_the_message_is_retried() -> None:
    client = _client()
    with Stubber(client) as stub:
        stub.add_client_error("invoke", service_error_code="TooManyRequestsException", http_status_code=429)
        with pytest.raises(CloudError) as raised:
            LambdaReplacementRequester(client, function_name="prov").request_replacement(
                source="interruption", nodes=["n1"], unavailable=[], event_id="ev")
        assert raised.value.throttled and raised.value.retryable
