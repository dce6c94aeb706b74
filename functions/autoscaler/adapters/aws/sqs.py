"""SQS for the interruption function: the visibility of a message returned for retry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autoscaler.adapters.aws._calls import Caller


class SqsMessageVisibility:
    """``MessageVisibility`` on SQS. The queue URL is built from the record's ARN
    (``arn:aws:sqs:REGION:ACCOUNT:NAME``), as Lambda names the queue it read from. ``sqs`` makes the client
    on first use: most invocations return no message for retry and never need one."""

    def __init__(self, sqs: Callable[[], Any]) -> None:
        self._client = sqs
        self._sqs: Caller | None = None

    def change_visibility(self, *, source_arn: str, receipt_handle: str, seconds: int) -> bool:
        arn = source_arn.split(":")
        if len(arn) != 6 or not receipt_handle:
            return False
        if self._sqs is None:
            self._sqs = Caller(self._client())
        url = f"https://sqs.{arn[3]}.amazonaws.com/{arn[4]}/{arn[5]}"
        self._sqs("change_message_visibility", QueueUrl=url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds)
        return True
