"""The ``MessageVisibility`` contract, run against the in-memory fake (``tests/app/fakes.MemoryQueue``) and
the SQS adapter on moto: the fake may never be more forgiving than SQS."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import boto3
import pytest

from autoscaler.adapters.aws.sqs import SqsMessageVisibility
from autoscaler.app.ports import CloudError, MessageVisibility
from tests.app.fakes import MemoryQueue
from tests.moto_env import moto_environment

REGION = "us-east-1"


@dataclass
class Queue:
    """A port implementation, the queue ARN it serves, and a way to receive a message from it."""

    port: MessageVisibility
    arn: str
    receive: Callable[[str], tuple[str, str]]  # body -> (message id, receipt handle)
    visible_again: Callable[[], list[str]]  # message ids receivable now


def _fake() -> Iterator[Queue]:
    queue = MemoryQueue()
    yield Queue(port=queue, arn=queue.arn, receive=queue.receive,
                visible_again=lambda: [m for m, seconds in queue.changes if seconds == 0])


def _sqs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Queue]:
    with moto_environment(monkeypatch, REGION):
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="interruption", Attributes={"VisibilityTimeout": "130"})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

        def receive(body: str) -> tuple[str, str]:
            sqs.send_message(QueueUrl=url, MessageBody=body)
            message = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"][0]
            return str(message["MessageId"]), str(message["ReceiptHandle"])

        def visible_again() -> list[str]:
            return [str(m["MessageId"]) for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
                    .get("Messages") or ()]

        yield Queue(port=SqsMessageVisibility(lambda: sqs), arn=arn, receive=receive, visible_again=visible_again)


@pytest.fixture(params=["fake", "sqs"])
def queue(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Queue]:
    yield from (_fake() if request.param == "fake" else _sqs(monkeypatch))


def test_a_received_message_comes_back_when_its_visibility_says(queue: Queue) -> None:
    message_id, handle = queue.receive(json.dumps({"detail-type": "x"}))
    assert queue.visible_again() == []  # received: invisible for the queue's timeout
    assert queue.port.change_visibility(source_arn=queue.arn, receipt_handle=handle, seconds=0) is True
    assert queue.visible_again() == [message_id]


def test_a_record_that_names_no_message_changes_nothing(queue: Queue) -> None:
    _, handle = queue.receive("{}")
    assert queue.port.change_visibility(source_arn="not-an-arn", receipt_handle=handle, seconds=0) is False
    assert queue.port.change_visibility(source_arn=queue.arn, receipt_handle="", seconds=0) is False
    assert queue.visible_again() == []


def test_a_receipt_handle_the_queue_never_gave_is_refused(queue: Queue) -> None:
    queue.receive("{}")
    with pytest.raises(CloudError):
        queue.port.change_visibility(source_arn=queue.arn, receipt_handle="AQEBforged==", seconds=0)
