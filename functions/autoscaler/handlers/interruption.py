"""The interruption function's entry point: an SQS batch of EventBridge events (spot interruption
warnings, rebalance recommendations, AWS Health scheduled changes, instance state changes).

The batch algorithm (cordon every message first, drain every node at once, report each message, shorten
the visibility of those returned for retry) is ``app/interruption_batch.InterruptionBatch``; this handler
wires it to Powertools' ``BatchProcessor``, which reports the messages it raised for as partial batch
failures, so one failing message never sends the whole batch back.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from autoscaler.adapters.aws.lifecycle_hooks import AsgLifecycleHooks
from autoscaler.app.drain import DrainOptions
from autoscaler.app.interruption import InterruptionService
from autoscaler.app.interruption_batch import (
    CORDON_WORKERS,
    DRAIN_WORKERS,
    MESSAGE_WORKERS,
    POLL_INTERVAL_SECONDS,
    RETRY_INTERVAL_SECONDS,
    DrainPools,
    InterruptionBatch,
    QueuedMessage,
)
from autoscaler.handlers.observability import logger, metrics, tracer
from autoscaler.handlers.runtime import InterruptionWarm, Runtime, get_runtime


def batch_processor() -> BatchProcessor:
    """Powertools' SQS batch processor. A batch whose every message failed is still answered with
    batchItemFailures (not an invocation error): the same messages come back either way, and the Lambda
    errors alarm stays for real crashes."""
    return BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def interruption_warm(rt: Runtime) -> InterruptionWarm:
    """The container's batch processor and drain pools, built on its first invocation."""
    if rt.warm.interruption is None:
        rt.warm.interruption = InterruptionWarm(
            processor=batch_processor(),
            pools=DrainPools(nodes=ThreadPoolExecutor(max_workers=DRAIN_WORKERS, thread_name_prefix="drain"),
                             messages=ThreadPoolExecutor(max_workers=MESSAGE_WORKERS, thread_name_prefix="message"),
                             cordons=ThreadPoolExecutor(max_workers=CORDON_WORKERS, thread_name_prefix="cordon")))
    return rt.warm.interruption


def build_service(rt: Runtime) -> InterruptionService:
    cfg = rt.config.interruption
    return InterruptionService(cluster=rt.cluster, cloud=rt.cloud, replacements=rt.replacement_requester(),
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


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    rt = get_runtime()
    warm = interruption_warm(rt)
    messages = [QueuedMessage.from_record(r) for r in event.get("Records") or ()]
    batch = InterruptionBatch(service=build_service(rt), sink=rt.sink, clock=rt.clock, pools=warm.pools,
                              remaining_seconds=lambda: float(context.get_remaining_time_in_millis()) / 1000.0,
                              visibility=rt.message_visibility(), log=logger,
                              invocation_id=str(getattr(context, "aws_request_id", "") or ""))
    batch.prepare(messages)
    try:
        response: dict[str, Any] = dict(process_partial_response(
            event=event, record_handler=lambda record: batch.process(_message(record)), processor=warm.processor,
            context=context))
    finally:
        batch.release()
    batch.retry_soon(messages, {str(f.get("itemIdentifier")) for f in response.get("batchItemFailures") or ()})
    return response


def _message(record: SQSRecord) -> QueuedMessage:
    return QueuedMessage.from_record(record.raw_event)
