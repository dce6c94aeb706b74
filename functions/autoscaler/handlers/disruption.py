"""The disruption function (EventBridge Scheduler, every minute): one pass of
``DisruptionService`` with the container's runtime, bounded by the Lambda's remaining time.

Replacement capacity (Expired, Underutilized/Replace) is asked of the provisioner function
(asynchronous invoke, WAVE2 contract) when the deployment names one; without it (local runs, tests)
the pass launches the replacement itself through the same planner and launcher.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from autoscaler.config import duration_seconds
from autoscaler.domain.disruption import Candidate, Settings
from autoscaler.domain.disruption_service import DisruptionService, Options, ReplacementRequester
from autoscaler.handlers.observability import logger, metrics, tracer
from autoscaler.handlers.runtime import Runtime, get_runtime

# Seconds kept back from the Lambda's remaining time for the final API calls and metric flush.
MARGIN_SECONDS = 10.0


def options_for(rt: Runtime, *, dry_run: bool | None = None) -> Options:
    cfg = rt.config.disruption
    return Options(
        dry_run=cfg.dry_run if dry_run is None else dry_run,
        settings=Settings(allow_bare_pods=cfg.allow_bare_pods,
                          spot_to_spot_consolidation=cfg.spot_to_spot_consolidation),
        blocked_drain_timeout=duration_seconds(cfg.blocked_drain_timeout),
        replacement_timeout=duration_seconds(cfg.replacement_timeout),
        drain_seconds_per_pass=cfg.drain_seconds_per_pass,
    )


def provisioner_requester(rt: Runtime) -> ReplacementRequester | None:
    """Invoke the provisioner asynchronously for a candidate's pods, or None without a provisioner."""
    function = rt.env.provisioner_function
    if not function:
        return None

    def request(c: Candidate) -> str | None:
        payload = {"source": "disruption", "kind": "replacement", "nodes": list(c.nodes), "unavailable": [],
                   "eventId": f"disruption-{c.reason.lower()}-{'-'.join(c.nodes)}-{int(rt.clock.now())}"}
        try:
            rt.client("lambda").invoke(FunctionName=function, InvocationType="Event",
                                       Payload=json.dumps(payload).encode())
        except (ClientError, BotoCoreError) as exc:
            return f"invoking {function} failed: {exc}"
        return None

    return request


def _sleep_for(rt: Runtime) -> Callable[[float], None]:
    # A clock that can be advanced (the simulation's) is slept on; the system clock with time.sleep.
    advance = getattr(rt.clock, "advance", None)
    return advance if callable(advance) else time.sleep


def service_for(rt: Runtime, *, dry_run: bool | None = None) -> DisruptionService:
    return DisruptionService(
        cluster=rt.cluster, cloud=rt.cloud, node_pools=rt.node_pools, node_classes=rt.node_classes,
        cluster_name=rt.config.cluster_name, region=rt.config.region, clock=rt.clock, sink=rt.sink,
        options=options_for(rt, dry_run=dry_run), request_replacement=provisioner_requester(rt),
        sleep=_sleep_for(rt),
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """Scheduled event ``{"source": "schedule", "kind": "disruption"}``; ``"dryRun": true`` in the event
    forces a dry run."""
    rt = get_runtime()
    if not rt.config.disruption.enabled:
        return {"skipped": "disruption is disabled in the cluster configuration"}
    dry_run = True if isinstance(event, Mapping) and event.get("dryRun") is True else None
    deadline = rt.clock.monotonic() + context.get_remaining_time_in_millis() / 1000.0 - MARGIN_SECONDS
    report = service_for(rt, dry_run=dry_run).run_pass(deadline=deadline)
    logger.info("disruption pass done", extra={"report": report.to_json()})
    return report.to_json()
