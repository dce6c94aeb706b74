"""Replacement requests to the provisioner function: an asynchronous ``lambda:Invoke``
(``InvocationType="Event"``), so the caller never waits for a provisioning pass. Implements
``autoscaler.app.ports.ReplacementRequester``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from autoscaler.adapters.aws._calls import Caller

if TYPE_CHECKING:
    from autoscaler.app.ports import ReplacementRequester


def replacement_payload(*, source: str, nodes: Sequence[str], unavailable: Sequence[tuple[str, str, str]],
                        event_id: str) -> dict[str, Any]:
    """The cross-function contract (docs/interruption.md): what the provisioner receives."""
    return {"source": source, "kind": "replacement", "nodes": list(nodes),
            "unavailable": [list(o) for o in unavailable], "eventId": event_id}


class LambdaReplacementRequester:
    """Invokes ``function_name`` asynchronously. With no function name (a local run without a
    provisioner) requests are dropped and reported as not sent."""

    def __init__(self, lambda_client: Any, *, function_name: str | None) -> None:
        self._lambda = Caller(lambda_client)
        self.function_name = function_name

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._lambda.calls)

    def request_replacement(self, *, source: Literal["interruption", "disruption"], nodes: Sequence[str],
                            unavailable: Sequence[tuple[str, str, str]], event_id: str) -> bool:
        if not self.function_name:
            return False
        payload = replacement_payload(source=source, nodes=nodes, unavailable=unavailable, event_id=event_id)
        # Async invokes are queued by Lambda (HTTP 202) and retried by it twice on function errors; the
        # provisioner's pass is idempotent, so a duplicate costs one extra plan, never extra capacity.
        self._lambda("invoke", FunctionName=self.function_name, InvocationType="Event",
                     Payload=json.dumps(payload).encode())
        return True


if TYPE_CHECKING:
    def _implements_port(r: LambdaReplacementRequester) -> ReplacementRequester:
        return r
