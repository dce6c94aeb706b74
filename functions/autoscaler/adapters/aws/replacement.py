"""Asynchronous invokes of the provisioner function (``lambda:Invoke`` with ``InvocationType="Event"``),
so the caller never waits for a provisioning pass: replacement requests (interruption, disruption;
``autoscaler.app.ports.ReplacementRequester``) and the watcher's wake-ups (``ProvisionerWaker``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from autoscaler.adapters.aws._calls import Caller

if TYPE_CHECKING:
    from autoscaler.app.ports import ProvisionerWaker, ReplacementRequester


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


def wake_payload(*, reason: str, pods: int, resource_version: str = "") -> dict[str, Any]:
    """What the provisioner receives from the watcher (docs/provisioner.md): a plain pass, no watch, whose
    view of the pods includes ``resourceVersion`` (the newest pod version of the batch)."""
    payload: dict[str, Any] = {"source": "watcher", "kind": "provisioner", "reason": reason, "pods": pods}
    if resource_version:
        payload["resourceVersion"] = resource_version
    return payload


class LambdaProvisionerWaker:
    """The watcher's wake-up: one asynchronous invoke per batch. A duplicate (two overlapping watcher
    invocations seeing the same pod) costs one extra plan, never extra capacity: passes take the launch
    lease and node claims make CreateFleet idempotent."""

    def __init__(self, lambda_client: Any, *, function_name: str) -> None:
        self._lambda = Caller(lambda_client)
        self.function_name = function_name

    def wake(self, *, reason: str, pods: int, resource_version: str = "") -> None:
        payload = wake_payload(reason=reason, pods=pods, resource_version=resource_version)
        self._lambda("invoke", FunctionName=self.function_name, InvocationType="Event",
                     Payload=json.dumps(payload).encode())


if TYPE_CHECKING:
    def _implements_port(r: LambdaReplacementRequester) -> ReplacementRequester:
        return r

    def _implements_waker(w: LambdaProvisionerWaker) -> ProvisionerWaker:
        return w
