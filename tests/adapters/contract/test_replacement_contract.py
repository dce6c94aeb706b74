"""The ``ReplacementRequester`` contract (``autoscaler.app.ports``), run against the service tests' fake
(``tests/app/fakes.Replacements``) and the adapter the handlers use (``LambdaReplacementRequester``) on moto's
Lambda: the fake may never be more forgiving than Lambda.

What the provisioner function receives is read from the far side: moto's Lambda, without Docker, does not run
the function, so ``_recording_lambda`` puts a recorder where moto would start it. moto still looks the function
up first, so an invoke of a function that is gone fails as Lambda's does (``ResourceNotFoundException``).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.replacement import LambdaReplacementRequester
from autoscaler.app.ports import CloudError, CloudNotFoundError, ReplacementRequester
from tests.app.fakes import Replacements
from tests.moto_env import moto_environment

REGION = "us-east-1"
FUNCTION = "eks-autoscaler-provisioner"
UNAVAILABLE = ("m5.large", "us-east-1a", "spot")


@dataclass
class Provisioner:
    """A port implementation and the provisioner function behind it."""

    port: ReplacementRequester
    received: Callable[[], list[dict[str, Any]]]  # the events the function was invoked with, in order
    remove: Callable[[], None]  # the function goes away: further requests are refused
    unconfigured: Callable[[], ReplacementRequester]  # the port where no provisioner function is configured


def fake_provisioner(fake_type: type[Replacements] = Replacements) -> Iterator[Provisioner]:
    """The fake (``test_fakes_are_strict.py`` plants forgiving variants of it)."""
    fake = fake_type()

    def remove() -> None:
        fake.refusing = CloudNotFoundError(f"invoke: ResourceNotFoundException: Function not found: {FUNCTION}",
                                           operation="invoke", code="ResourceNotFoundException", status=404)
    yield Provisioner(port=fake, received=lambda: list(fake.requests), remove=remove,
                      unconfigured=lambda: fake_type(provisioner=False))


def _recording_lambda(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The events moto's Lambda is asked to run the function with (moto's function model runs them in Docker)."""
    from moto.awslambda.models import LambdaFunction

    events: list[dict[str, Any]] = []

    def record(self: LambdaFunction, event: Any = None) -> tuple[str, bool, str]:
        events.append(event)
        return "", False, ""
    monkeypatch.setattr(LambdaFunction, "_invoke_lambda", record)
    return events


def _lambda(monkeypatch: pytest.MonkeyPatch) -> Iterator[Provisioner]:
    with moto_environment(monkeypatch, REGION):
        events = _recording_lambda(monkeypatch)
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="provisioner", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                    "Principal": {"Service": "lambda.amazonaws.com"}}]}))["Role"]
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as archive:
            archive.writestr("handler.py", "def handler(event, context):\n    return None\n")
        client = boto3.client("lambda", region_name=REGION)
        client.create_function(FunctionName=FUNCTION, Runtime="python3.12", Role=role["Arn"],
                               Handler="handler.handler", Code={"ZipFile": code.getvalue()})
        yield Provisioner(port=LambdaReplacementRequester(client, function_name=FUNCTION),
                          received=lambda: list(events),
                          remove=lambda: client.delete_function(FunctionName=FUNCTION),
                          unconfigured=lambda: LambdaReplacementRequester(client, function_name=None))


@pytest.fixture(params=["fake", "lambda"])
def provisioner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Provisioner]:
    yield from (fake_provisioner() if request.param == "fake" else _lambda(monkeypatch))


def test_a_request_reaches_the_provisioner_as_the_cross_function_payload(provisioner: Provisioner) -> None:
    sent = provisioner.port.request_replacement(source="interruption", nodes=["n1", "n2"], unavailable=[UNAVAILABLE],
                                                event_id="spot-1")
    assert sent is True
    assert provisioner.received() == [{"source": "interruption", "kind": "replacement", "nodes": ["n1", "n2"],
                                       "unavailable": [list(UNAVAILABLE)], "eventId": "spot-1"}]


def test_every_request_is_sent_once_in_order(provisioner: Provisioner) -> None:
    provisioner.port.request_replacement(source="interruption", nodes=["n1"], unavailable=[], event_id="spot-1")
    provisioner.port.request_replacement(source="disruption", nodes=["n2"], unavailable=[], event_id="drift-2")
    assert [(e["source"], e["nodes"], e["eventId"]) for e in provisioner.received()] == [
        ("interruption", ["n1"], "spot-1"), ("disruption", ["n2"], "drift-2")]


def test_without_a_provisioner_nothing_is_sent_and_the_caller_is_told(provisioner: Provisioner) -> None:
    sent = provisioner.unconfigured().request_replacement(source="interruption", nodes=["n1"], unavailable=[],
                                                          event_id="spot-1")
    assert sent is False
    assert provisioner.received() == []


def test_a_request_lambda_refuses_raises_a_typed_error_and_reaches_no_one(provisioner: Provisioner) -> None:
    provisioner.remove()
    with pytest.raises(CloudError) as raised:
        provisioner.port.request_replacement(source="interruption", nodes=["n1"], unavailable=[], event_id="spot-1")
    # The function is gone: not worth retrying within the invocation (the message comes back instead).
    assert isinstance(raised.value, CloudNotFoundError) and not raised.value.retryable
    assert raised.value.code == "ResourceNotFoundException"
    assert provisioner.received() == []
