"""One SQS batch of interruption messages, as Powertools' ``BasePartialProcessor`` owns its algorithm: the
handler only wires it to the batch utility, which reports the messages ``process`` raised for as partial
batch failures.

Before any drain starts, every message of the batch is cordoned and its replacement requested (a sub-second
pass), so a slow drain of the first message never delays the cordon of the tenth. Then every node of every
message is drained at once on a bounded pool (``DRAIN_WORKERS``, NTH's default of 10), each until its own
event's deadline or the invocation's end less a safety margin, whichever is first; each message is then
reported in batch order from those results. Malformed and unknown messages are logged with their message
id, counted and acknowledged; a failure worth retrying (Kubernetes API or AWS errors, a drain that could not
finish in this invocation) raises, so the message is returned and, after the queue's ``maxReceiveCount``,
lands in the DLQ. A message returned for retry has its visibility shortened so it comes back inside the spot
notice (``MessageVisibility``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from autoscaler import metrics_catalog as mc
from autoscaler.app.drain_lease import DrainLease
from autoscaler.app.interruption import EventOutcome, InstanceOutcome, InterruptionService, Outcome
from autoscaler.app.ports import Clock, CloudError, MessageVisibility
from autoscaler.domain.interruption import (
    Ignored,
    InterruptionEvent,
    LaunchHook,
    MalformedEvent,
    kind_of_detail_type,
    parse_event,
)
from autoscaler.metrics_catalog import MetricsSink

# Stop draining this long before Lambda would kill the invocation: enough to record the outcome, emit
# metrics and return the batch response (a timed-out invocation fails every message of the batch).
SAFETY_MARGIN_SECONDS = 10.0
# How often a drain polls for evicted pods to disappear, and retries evictions a PDB refused (kubectl
# drain retries every 5 s too).
POLL_INTERVAL_SECONDS = 0.5
RETRY_INTERVAL_SECONDS = 5.0
# A message returned for retry comes back after this long, not after the queue's visibility timeout (the
# function's timeout + 10 s, longer than the two-minute spot notice): the retry lands inside the notice.
RETRY_VISIBILITY_SECONDS = 10
# Nodes drained at once (NTH's workers default); a batch holds at most 10 messages, a Health event may name
# more nodes than that, which then queue for a worker (and are not started past their deadline).
DRAIN_WORKERS = 10
# Messages waiting for their nodes' drains at once (a batch holds at most 10).
MESSAGE_WORKERS = 10
# Nodes tainted and cordoned at once: a Health event may name dozens of nodes, and one after the other
# their round trips (about 7 per node) put the first eviction seconds into the batch.
CORDON_WORKERS = 10

_BEGUN = frozenset({Outcome.CORDONED, Outcome.TAINTED})
_ACTED = frozenset({Outcome.TAINTED, Outcome.CORDONED, Outcome.DRAINED, Outcome.TERMINATED, Outcome.NODE_DELETED})


class EventLog(Protocol):
    """Where the batch writes its per-message log lines (the handler passes its structured logger)."""

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> Any: ...
    def info(self, msg: str, *args: Any, **kwargs: Any) -> Any: ...
    def warning(self, msg: str, *args: Any, **kwargs: Any) -> Any: ...
    def exception(self, msg: str, *args: Any, **kwargs: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """One SQS record: what the batch needs of it."""

    message_id: str
    body: str
    source_arn: str = ""
    receipt_handle: str = ""

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> QueuedMessage:
        """From the record as Lambda delivers it (``messageId``, ``body``, ``eventSourceArn``, ``receiptHandle``)."""
        return cls(message_id=str(record.get("messageId", "")), body=str(record.get("body", "")),
                   source_arn=str(record.get("eventSourceArn") or ""),
                   receipt_handle=str(record.get("receiptHandle") or ""))


@dataclass
class DrainPools:
    """A container's worker pools: node drains run on ``nodes``; each message's handling waits for its
    nodes on ``messages`` (a separate pool, so a waiting message never holds a worker a node needs); nodes
    are tainted and cordoned on ``cordons`` (a third, so a cordon never queues behind a drain; None: one
    node after the other)."""

    nodes: Executor
    messages: Executor
    cordons: Executor | None = None


class DrainIncomplete(RuntimeError):
    """A drain could not finish in this invocation; the message is returned for retry (node stays cordoned)."""


class NodeNotReady(RuntimeError):
    """A launch lifecycle hook waits for its instance to be a Ready node; the message is returned for retry."""


@dataclass
class InterruptionBatch:
    """One invocation's messages: ``prepare`` (the cordon pass over all of them, every drain started), then
    ``process`` per message in batch order (raises to return the message for retry), then ``retry_soon``."""

    service: InterruptionService
    sink: MetricsSink
    clock: Clock
    pools: DrainPools
    remaining_seconds: Callable[[], float]  # the invocation's remaining time
    visibility: MessageVisibility | None = None
    log: EventLog = field(default_factory=lambda: logging.getLogger("autoscaler.app.interruption"))
    begun: dict[str, tuple[InstanceOutcome, ...]] = field(default_factory=dict)
    handled: dict[str, Future[EventOutcome]] = field(default_factory=dict)
    # The Lambda request id. The drains this invocation takes are held in its name, with a random part (a
    # local run's request ids repeat), until the invocation ends: every message of the batch shares the
    # lease, since the batch itself orders the messages that name the same instance.
    invocation_id: str = ""
    _lease: DrainLease | None = field(default=None, init=False, repr=False)

    @property
    def lease(self) -> DrainLease:
        if self._lease is None:
            self._lease = DrainLease(f"{self.invocation_id or 'invocation'}/{uuid.uuid4().hex[:8]}",
                                     self.clock.now() + max(self.remaining_seconds(), 0.0))
        return self._lease

    def prepare(self, messages: Sequence[QueuedMessage]) -> None:
        self._cordon_all(messages)
        self._drain_all(messages)

    def _cordon_all(self, messages: Sequence[QueuedMessage]) -> None:
        for message in messages:
            try:
                parsed = parse_event(message.body)
                if isinstance(parsed, InterruptionEvent):
                    self.begun[message.message_id] = self.service.begin(parsed, pool=self.pools.cordons,
                                                                        lease=self.lease)
            except Exception:  # the message's own handling (``process``) reports it and returns it for retry
                self.log.debug("cordon pass skipped a record", extra={"message_id": message.message_id})

    def _drain_all(self, messages: Sequence[QueuedMessage]) -> None:
        """Start every message's drains at once; ``process`` collects each result in turn."""
        until = self._drain_until()
        last_for: dict[str, Future[EventOutcome]] = {}
        for message in messages:
            try:
                parsed = parse_event(message.body)
            except MalformedEvent:
                continue  # reported by ``process``
            if not isinstance(parsed, InterruptionEvent):
                continue
            # Messages naming the same instance (a state change and a spot warning in one batch) run one
            # after the other, in batch order. The pool starts tasks in submission order, so an earlier
            # message is always running or done: no deadlock.
            before = [last_for[i] for i in parsed.instance_ids if i in last_for]
            # The cordon pass's outcome stands unless an earlier message of the batch may have drained or
            # deleted one of the nodes since, or a replacement request is still to be sent (throttled): then
            # ``begin`` runs again and sees where the cluster is.
            begun = self.begun.get(message.message_id)
            if before or begun is None or any(o.outcome in _BEGUN and not o.replacement_requested for o in begun):
                begun = None
            future = self.pools.messages.submit(self._handle_after, before, parsed, until, begun,
                                                message.message_id)
            self.handled[message.message_id] = future
            for iid in parsed.instance_ids:
                last_for[iid] = future

    def _handle_after(self, before: list[Future[EventOutcome]], event: InterruptionEvent,
                      until: float, begun: tuple[InstanceOutcome, ...] | None, message_id: str) -> EventOutcome:
        wait(before)
        return self.service.handle(event, drain_until=until, pool=self.pools.nodes, cordons=self.pools.cordons,
                                   begun=begun, taken_elsewhere=self._taken_elsewhere(message_id), lease=self.lease)

    def _taken_elsewhere(self, message_id: str) -> frozenset[str]:
        """Instances the cordon pass found taken by another invocation (a concurrent duplicate)."""
        return frozenset(o.instance_id for o in self.begun.get(message_id, ())
                         if o.outcome is Outcome.ALREADY_DRAINING)

    def process(self, message: QueuedMessage) -> None:
        """Report one message; raises when it must come back for retry."""
        message_id = message.message_id
        try:
            parsed = parse_event(message.body)
        except MalformedEvent as exc:
            self._emit("malformed", "ignore", "ignored")
            self.log.warning("malformed interruption message acknowledged",
                             extra={"message_id": message_id, "outcome": "malformed", "error": str(exc)})
            return
        if isinstance(parsed, Ignored):
            kind = kind_of_detail_type(parsed.detail_type)
            self._emit(kind, "ignore", "ignored")
            self.log.info("interruption message ignored", extra={
                "message_id": message_id, "event_id": parsed.event_id, "kind": kind, "action": "ignore",
                "outcome": "ignored", "reason": parsed.reason})
            return
        if isinstance(parsed, LaunchHook):
            self._launch_hook(message_id, parsed)
            return
        self._handle(message_id, parsed)

    def _launch_hook(self, message_id: str, hook: LaunchHook) -> None:
        log = {"message_id": message_id, "event_id": hook.event_id, "kind": "asgLaunchLifecycle",
               "instance_ids": [hook.action.instance_id], "group": hook.action.group, "hook": hook.action.hook}
        try:
            done = self.service.handle_launch(hook)
        except Exception as exc:  # any failure: logged with the message id, counted, and the message retried
            self._emit("asgLaunchLifecycle", "continue", "failed")
            self.log.exception("launch lifecycle message failed; returned for retry",
                               extra={**log, "outcome": "failed", "error": str(exc)})
            raise
        if not done:
            self._emit("asgLaunchLifecycle", "continue", "waiting")
            self.log.info("launch lifecycle hook waits for the node to be Ready; returned for retry",
                          extra={**log, "outcome": "waiting"})
            raise NodeNotReady(f"instance {hook.action.instance_id} is not a Ready node yet")
        self._emit("asgLaunchLifecycle", "continue", "continued")
        self.log.info("launch lifecycle hook continued", extra={**log, "outcome": "continued"})

    def _handle(self, message_id: str, event: InterruptionEvent) -> None:
        action = self.service.action(event).value
        log = {"message_id": message_id, "event_id": event.event_id, "kind": event.kind.value, "action": action,
               "instance_ids": list(event.instance_ids)}
        try:
            started = self.handled.get(message_id)
            outcome = started.result() if started is not None else self.service.handle(
                event, drain_until=self._drain_until(), pool=self.pools.nodes, cordons=self.pools.cordons,
                lease=self.lease)
        except Exception as exc:  # any failure: logged with the message id, counted, and the message retried
            self._emit(event.kind.value, action, "failed")
            self.log.exception("interruption message failed; returned for retry",
                               extra={**log, "outcome": "failed", "error": str(exc)})
            raise
        outcome = merge_begun(outcome, self.begun.get(message_id, ()))
        summary = summarize(outcome)
        self._emit(event.kind.value, action, summary)
        self._emit_figures(outcome)
        self.log.info("interruption message handled", extra={
            **log, "outcome": summary, "nodes": [i.node for i in outcome.instances if i.node],
            "instances": {i.instance_id: {"node": i.node, "outcome": i.outcome.value, "owned": i.owned,
                                          "evicted": len(i.evicted),
                                          "notEvicted": [f"{p.pod} ({p.reason})" for p in i.not_evicted]}
                          for i in outcome.instances}})
        if outcome.retry:
            stuck = [i for i in outcome.instances if i.retry]
            raise DrainIncomplete(", ".join(f"{i.node}: {len(i.not_evicted)} pods left" for i in stuck))

    def release(self) -> None:
        """The invocation ends: the drains it holds are released for the next invocation (a retried message
        continues at once instead of waiting for this invocation's lease to end)."""
        if self._lease is not None:
            self.service.release(self._lease)

    def retry_soon(self, messages: Sequence[QueuedMessage], failed: set[str]) -> None:
        """Shorten the visibility of every message returned for retry to ``RETRY_VISIBILITY_SECONDS``. Best
        effort: a message whose visibility cannot be changed still comes back, after the queue's timeout."""
        if self.visibility is None:
            return
        for message in messages:
            if message.message_id not in failed:
                continue
            try:
                self.visibility.change_visibility(source_arn=message.source_arn,
                                                  receipt_handle=message.receipt_handle,
                                                  seconds=RETRY_VISIBILITY_SECONDS)
            except CloudError as exc:  # the message is not lost either way; say why it is late
                self.log.warning("could not shorten a failed message's visibility; it returns after the queue's "
                                 "timeout", extra={"message_id": message.message_id, "error": str(exc)})

    def _drain_until(self) -> float:
        """The invocation's end less the safety margin: drains run in parallel, so each may use all of it."""
        return self.clock.monotonic() + max(self.remaining_seconds() - SAFETY_MARGIN_SECONDS, 0.0)

    def _emit(self, kind: str, action: str, outcome: str) -> None:
        self.sink.emit(mc.INTERRUPTION_EVENTS, 1, **{mc.KIND: kind, mc.ACTION: action})
        self.sink.emit(mc.INTERRUPTION_OUTCOMES, 1, **{mc.KIND: kind, mc.OUTCOME: outcome})

    def _emit_figures(self, outcome: EventOutcome) -> None:
        for inst in outcome.instances:
            if inst.event_to_cordon is not None:
                self.sink.emit(mc.EVENT_TO_CORDON_SECONDS, inst.event_to_cordon)
            if inst.drain_seconds is not None:
                self.sink.emit(mc.DRAIN_SECONDS, inst.drain_seconds)
            if inst.evicted:
                self.sink.emit(mc.PODS_EVICTED, len(inst.evicted))
            if inst.evictions_blocked:
                self.sink.emit(mc.EVICTIONS_BLOCKED_BY_PDB, inst.evictions_blocked)
            if inst.evictions_throttled:
                self.sink.emit(mc.EVICTIONS_THROTTLED, inst.evictions_throttled)
            if inst.instance_gone:
                self.sink.emit(mc.NODES_DELETED_INSTANCE_GONE, 1)


def merge_begun(outcome: EventOutcome, begun: tuple[InstanceOutcome, ...]) -> EventOutcome:
    """Carry the cordon pass's figures (event-to-cordon time, replacement requested) into the outcome."""
    first = {b.instance_id: b for b in begun}
    merged = []
    for inst in outcome.instances:
        early = first.get(inst.instance_id)
        merged.append(inst if early is None else replace(
            inst, event_to_cordon=early.event_to_cordon if inst.event_to_cordon is None else inst.event_to_cordon,
            replacement_requested=inst.replacement_requested or early.replacement_requested))
    return EventOutcome(outcome.event_id, outcome.kind, outcome.action, tuple(merged))


def summarize(outcome: EventOutcome) -> str:
    """The message's outcome for the metric: failed > acted > notInCluster > ignored."""
    found = {i.outcome for i in outcome.instances}
    if outcome.retry:
        return "failed"
    if found & _ACTED:
        return "acted"
    if found and found <= {Outcome.NOT_IN_CLUSTER}:
        return "notInCluster"
    return "ignored"
