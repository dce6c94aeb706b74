"""The interruption function's entry point: an SQS batch of EventBridge events (spot interruption
warnings, rebalance recommendations, AWS Health scheduled changes, instance state changes).

Each record is read and classified by ``autoscaler.domain.interruption.parse_event`` (the one
envelope parser) and handed to ``InterruptionService``. Powertools'
``BatchProcessor`` reports partial batch failures, so one failing message never sends the whole batch
back: malformed and unknown messages are logged with their message id, counted and acknowledged; a
failure worth retrying (Kubernetes API or AWS errors, a drain that could not finish in this invocation)
is returned in ``batchItemFailures`` and, after the queue's ``maxReceiveCount``, lands in the DLQ.

Before any drain starts, every message of the batch is cordoned and its replacement requested (a
sub-second pass), so a slow drain of the first message never delays the cordon of the tenth. Then every
node of every message is drained at once on a bounded pool of ``DRAIN_WORKERS`` threads (NTH's default
of 10 workers), each until its own event's deadline or the invocation's end less a safety margin,
whichever is first; the records are then reported in order from those results.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from autoscaler import metrics_catalog as mc
from autoscaler.adapters.aws.lifecycle_hooks import AsgLifecycleHooks
from autoscaler.app.drain import DrainOptions
from autoscaler.app.interruption import EventOutcome, InstanceOutcome, InterruptionService, Outcome
from autoscaler.domain.interruption import (
    EventKind,
    Ignored,
    InterruptionEvent,
    LaunchHook,
    MalformedEvent,
    parse_event,
)
from autoscaler.handlers.observability import logger, metrics, tracer
from autoscaler.handlers.runtime import Runtime, get_runtime, replacement_requester

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

_KIND_BY_DETAIL_TYPE = {
    "EC2 Spot Instance Interruption Warning": EventKind.SPOT_INTERRUPTION.value,
    "EC2 Instance Rebalance Recommendation": EventKind.REBALANCE.value,
    "AWS Health Event": EventKind.SCHEDULED_CHANGE.value,
    "EC2 Instance State-change Notification": EventKind.STATE_CHANGE.value,
    "EC2 Instance-terminate Lifecycle Action": EventKind.ASG_LIFECYCLE.value,
    "EC2 Instance-launch Lifecycle Action": EventKind.ASG_LIFECYCLE.value,
}
_ACTED = frozenset({Outcome.TAINTED, Outcome.CORDONED, Outcome.DRAINED, Outcome.TERMINATED, Outcome.NODE_DELETED})

# A batch whose every message failed is still answered with batchItemFailures (not an invocation error):
# the same messages come back either way, and the Lambda errors alarm stays for real crashes.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
# Built once per container. Node drains run on ``_node_pool``; each message's handling waits for its nodes
# on ``_message_pool`` (a separate pool, so a waiting message never holds a worker a node needs).
_node_pool = ThreadPoolExecutor(max_workers=DRAIN_WORKERS, thread_name_prefix="drain")
_message_pool = ThreadPoolExecutor(max_workers=10, thread_name_prefix="message")


class DrainIncomplete(RuntimeError):
    """A drain could not finish in this invocation; the message is returned for retry (node stays cordoned)."""


class NodeNotReady(RuntimeError):
    """A launch lifecycle hook waits for its instance to be a Ready node; the message is returned for retry."""


def build_service(rt: Runtime) -> InterruptionService:
    cfg = rt.config.interruption
    return InterruptionService(cluster=rt.cluster, cloud=rt.cloud, replacements=replacement_requester(rt),
                               clock=rt.clock,
                               cluster_name=rt.config.cluster_name,
                               actions=cfg.model_dump(by_alias=True),
                               poll_interval=POLL_INTERVAL_SECONDS, retry_interval=RETRY_INTERVAL_SECONDS,
                               cordon_only=cfg.cordon_only, dry_run=cfg.dry_run,
                               drain_options=DrainOptions(grace_seconds=cfg.pod_termination_grace_period,
                                                          delete_local_data=cfg.delete_local_data,
                                                          delete_finished=cfg.delete_finished_pods),
                               node_grace_seconds=cfg.node_termination_grace_period,
                               exclude_node_labels=cfg.exclude_node_labels,
                               adopt_karpenter=rt.config.migration.adopt_karpenter_nodes,
                               hooks=AsgLifecycleHooks(rt.client("autoscaling")))


@dataclass
class _Batch:
    """One invocation's records: the cordon pass over all of them, every drain in parallel, then each
    record's report."""

    rt: Runtime
    service: InterruptionService
    context: Any
    begun: dict[str, tuple[InstanceOutcome, ...]] = field(default_factory=dict)
    handled: dict[str, Future[EventOutcome]] = field(default_factory=dict)

    def cordon_all(self, records: list[Mapping[str, Any]]) -> None:
        for record in records:
            try:
                parsed = parse_event(str(record.get("body", "")))
                if isinstance(parsed, InterruptionEvent):
                    self.begun[str(record.get("messageId", ""))] = self.service.begin(parsed)
            except Exception:  # the record's own handling below reports it and returns it for retry
                logger.debug("cordon pass skipped a record", extra={"message_id": record.get("messageId")})

    def drain_all(self, records: list[Mapping[str, Any]]) -> None:
        """Start every message's drains at once; ``record`` collects each result in turn."""
        until = self._drain_until()
        last_for: dict[str, Future[EventOutcome]] = {}
        for record in records:
            try:
                parsed = parse_event(str(record.get("body", "")))
            except MalformedEvent:
                continue  # reported by ``record``
            if not isinstance(parsed, InterruptionEvent):
                continue
            # Messages naming the same instance (a state change and a spot warning in one batch) run one
            # after the other, in batch order, as they did before drains ran in parallel. The pool starts
            # tasks in submission order, so an earlier message is always running or done: no deadlock.
            before = [last_for[i] for i in parsed.instance_ids if i in last_for]
            future = _message_pool.submit(self._handle_after, before, parsed, until)
            self.handled[str(record.get("messageId", ""))] = future
            for iid in parsed.instance_ids:
                last_for[iid] = future

    def _handle_after(self, before: list[Future[EventOutcome]], event: InterruptionEvent,
                      until: float) -> EventOutcome:
        wait(before)
        return self.service.handle(event, drain_until=until, pool=_node_pool)

    def record(self, record: SQSRecord) -> None:
        message_id = record.message_id
        try:
            parsed = parse_event(record.body)
        except MalformedEvent as exc:
            self._emit("malformed", "ignore", "ignored")
            logger.warning("malformed interruption message acknowledged",
                           extra={"message_id": message_id, "outcome": "malformed", "error": str(exc)})
            return
        if isinstance(parsed, Ignored):
            kind = _KIND_BY_DETAIL_TYPE.get(parsed.detail_type, "unknown")
            self._emit(kind, "ignore", "ignored")
            logger.info("interruption message ignored", extra={
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
        except Exception as exc:
            self._emit("asgLaunchLifecycle", "continue", "failed")
            logger.exception("launch lifecycle message failed; returned for retry",
                             extra={**log, "outcome": "failed", "error": str(exc)})
            raise
        if not done:
            self._emit("asgLaunchLifecycle", "continue", "waiting")
            logger.info("launch lifecycle hook waits for the node to be Ready; returned for retry",
                        extra={**log, "outcome": "waiting"})
            raise NodeNotReady(f"instance {hook.action.instance_id} is not a Ready node yet")
        self._emit("asgLaunchLifecycle", "continue", "continued")
        logger.info("launch lifecycle hook continued", extra={**log, "outcome": "continued"})

    def _handle(self, message_id: str, event: InterruptionEvent) -> None:
        action = self.service.action(event).value
        log = {"message_id": message_id, "event_id": event.event_id, "kind": event.kind.value, "action": action,
               "instance_ids": list(event.instance_ids)}
        try:
            started = self.handled.get(message_id)
            outcome = started.result() if started is not None else self.service.handle(
                event, drain_until=self._drain_until(), pool=_node_pool)
        except Exception as exc:
            self._emit(event.kind.value, action, "failed")
            logger.exception("interruption message failed; returned for retry",
                             extra={**log, "outcome": "failed", "error": str(exc)})
            raise
        outcome = _merge(outcome, self.begun.get(message_id, ()))
        summary = _summary(outcome)
        self._emit(event.kind.value, action, summary)
        self._emit_figures(outcome)
        logger.info("interruption message handled", extra={
            **log, "outcome": summary, "nodes": [i.node for i in outcome.instances if i.node],
            "instances": {i.instance_id: {"node": i.node, "outcome": i.outcome.value, "owned": i.owned,
                                          "evicted": len(i.evicted),
                                          "notEvicted": [f"{p.pod} ({p.reason})" for p in i.not_evicted]}
                          for i in outcome.instances}})
        if outcome.retry:
            stuck = [i for i in outcome.instances if i.retry]
            raise DrainIncomplete(", ".join(f"{i.node}: {len(i.not_evicted)} pods left" for i in stuck))

    def _drain_until(self) -> float:
        """The invocation's end less the safety margin: drains run in parallel, so each may use all of it."""
        remaining = float(self.context.get_remaining_time_in_millis()) / 1000.0 - SAFETY_MARGIN_SECONDS
        return self.rt.clock.monotonic() + max(remaining, 0.0)

    def _emit(self, kind: str, action: str, outcome: str) -> None:
        self.rt.sink.emit(mc.INTERRUPTION_EVENTS, 1, **{mc.KIND: kind, mc.ACTION: action})
        self.rt.sink.emit(mc.INTERRUPTION_OUTCOMES, 1, **{mc.KIND: kind, mc.OUTCOME: outcome})

    def _emit_figures(self, outcome: EventOutcome) -> None:
        sink = self.rt.sink
        for inst in outcome.instances:
            if inst.event_to_cordon is not None:
                sink.emit(mc.EVENT_TO_CORDON_SECONDS, inst.event_to_cordon)
            if inst.drain_seconds is not None:
                sink.emit(mc.DRAIN_SECONDS, inst.drain_seconds)
            if inst.evicted:
                sink.emit(mc.PODS_EVICTED, len(inst.evicted))
            if inst.evictions_blocked:
                sink.emit(mc.EVICTIONS_BLOCKED_BY_PDB, inst.evictions_blocked)
            if inst.evictions_throttled:
                sink.emit(mc.EVICTIONS_THROTTLED, inst.evictions_throttled)


def _merge(outcome: EventOutcome, begun: tuple[InstanceOutcome, ...]) -> EventOutcome:
    """Carry the cordon pass's figures (event-to-cordon time, replacement requested) into the outcome."""
    first = {b.instance_id: b for b in begun}
    merged = []
    for inst in outcome.instances:
        early = first.get(inst.instance_id)
        merged.append(inst if early is None else replace(
            inst, event_to_cordon=early.event_to_cordon if inst.event_to_cordon is None else inst.event_to_cordon,
            replacement_requested=inst.replacement_requested or early.replacement_requested))
    return EventOutcome(outcome.event_id, outcome.kind, outcome.action, tuple(merged))


def _summary(outcome: EventOutcome) -> str:
    """The message's outcome for the metric: failed > acted > notInCluster > ignored."""
    found = {i.outcome for i in outcome.instances}
    if outcome.retry:
        return "failed"
    if found & _ACTED:
        return "acted"
    if found and found <= {Outcome.NOT_IN_CLUSTER}:
        return "notInCluster"
    return "ignored"


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    rt = get_runtime()
    records = list(event.get("Records") or ())
    batch = _Batch(rt=rt, service=build_service(rt), context=context)
    batch.cordon_all(records)
    batch.drain_all(records)
    response: dict[str, Any] = dict(process_partial_response(event=event, record_handler=batch.record,
                                                             processor=processor, context=context))
    failures: list[Mapping[str, Any]] = list(response.get("batchItemFailures") or ())
    _retry_soon(rt, records, {str(f.get("itemIdentifier")) for f in failures})
    return response


def _retry_soon(rt: Runtime, records: list[Mapping[str, Any]], failed: set[str]) -> None:
    """Shorten the visibility of every message returned for retry to ``RETRY_VISIBILITY_SECONDS``. Best
    effort: a message whose visibility cannot be changed still comes back, after the queue's timeout."""
    for record in records:
        if str(record.get("messageId")) not in failed:
            continue
        arn = str(record.get("eventSourceArn") or "").split(":")
        if len(arn) != 6 or not record.get("receiptHandle"):
            continue
        url = f"https://sqs.{arn[3]}.amazonaws.com/{arn[4]}/{arn[5]}"
        try:
            rt.client("sqs").change_message_visibility(QueueUrl=url, ReceiptHandle=record["receiptHandle"],
                                                       VisibilityTimeout=RETRY_VISIBILITY_SECONDS)
        except Exception as exc:  # the message is not lost either way; say why it is late
            logger.warning("could not shorten a failed message's visibility; it returns after the queue's "
                           "timeout", extra={"message_id": record.get("messageId"), "error": str(exc)})
