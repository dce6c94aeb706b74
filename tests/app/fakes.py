"""In-memory fakes of the ports, for service tests (as Karpenter's ``fake/cloudprovider.go``): ``MemoryQueue``
here, ``FakeCluster`` in ``fakes_cluster.py``, ``FakeCloud`` in ``fakes_cloud.py`` (the claim store's is the
product's own ``app/claims.MemoryClaimStore``). Each is held to the real adapter's contract by the tests in
``tests/adapters/contract/``, which run the same test functions against the fake and against the adapter on
moto, the emulator or the real kube-apiserver."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

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
