"""In-memory fakes of the ports, for service tests (as Karpenter's ``fake/cloudprovider.go``): ``MemoryQueue``
here, ``FakeCluster`` in ``fakes_cluster.py``, ``FakeCloud`` in ``fakes_cloud.py`` (the claim store's is the
product's own ``app/claims.MemoryClaimStore``). Each is held to the real adapter's contract by the tests in
``tests/adapters/contract/``, which run the same test functions against the fake and against the adapter on
moto, the emulator or the real kube-apiserver. ``Replacements`` is the ``ReplacementRequester``'s fake
(``tests/adapters/contract/test_replacement_contract.py``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from autoscaler.app.ports import CloudError


@dataclass
class MemoryQueue:
    """``MessageVisibility`` over messages received from an in-memory queue. ``receive`` hands out a receipt
    handle as SQS does; a visibility change for a handle it never handed out fails as SQS's does.
    ``changes`` records every accepted change (message id, seconds)."""

    arn: str = "arn:aws:sqs:us-east-1:123456789012:interruption"
    changes: list[tuple[str, int]] = field(default_factory=list)
    next_error: CloudError | None = None  # raised by the next change, then cleared
    _handles: dict[str, str] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def receive(self, body: str) -> tuple[str, str]:
        """Queue ``body`` and receive it: its message id and receipt handle."""
        number = next(self._ids)
        message_id, handle = f"m-{number}", f"handle-{number}"
        self._handles[handle] = message_id
        return message_id, handle

    def change_visibility(self, *, source_arn: str, receipt_handle: str, seconds: int) -> bool:
        if len(source_arn.split(":")) != 6 or not receipt_handle:
            return False
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        if source_arn != self.arn or receipt_handle not in self._handles:
            raise CloudError(f"change_message_visibility: ReceiptHandleIsInvalid: {receipt_handle}",
                             operation="change_message_visibility", code="ReceiptHandleIsInvalid", status=400)
        self.changes.append((self._handles[receipt_handle], seconds))
        return True


@dataclass
class Replacements:
    """``ReplacementRequester`` as the provisioner function sees it: ``requests`` holds each event the
    provisioner was invoked with (the cross-function payload of docs/interruption.md), in order. With
    ``provisioner`` False no function is configured: nothing is sent and the caller is told so.
    ``failures`` are raised by the next requests, ``refusing`` by every request while it is set (what Lambda
    answers when the function is gone or throttled); ``refused`` counts both. A refused request reaches no one."""

    provisioner: bool = True
    requests: list[dict[str, Any]] = field(default_factory=list)
    failures: list[Exception] = field(default_factory=list)
    refusing: Exception | None = None
    refused: int = 0

    def request_replacement(self, *, source: Literal["interruption", "disruption"], nodes: Sequence[str],
                            unavailable: Sequence[tuple[str, str, str]], event_id: str) -> bool:
        if not self.provisioner:
            return False
        if self.failures or self.refusing is not None:
            self.refused += 1
            raise self.failures.pop(0) if self.failures else self.refusing  # type: ignore[misc]
        self.requests.append({"source": source, "kind": "replacement", "nodes": list(nodes),
                              "unavailable": [list(u) for u in unavailable], "eventId": event_id})
        return True
