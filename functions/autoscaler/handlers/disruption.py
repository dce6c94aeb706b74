"""The disruption function (EventBridge Scheduler, every minute): one pass of
``DisruptionService`` with the container's runtime, bounded by the Lambda's remaining time.

Replacement capacity (Expired, Underutilized/Replace) is asked of the provisioner function
(asynchronous invoke, the contract in docs/interruption.md) when the deployment names one; without it
(local runs, tests) the pass launches the replacement itself through the same planner and launcher.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.app.adoption import KarpenterNodes
from autoscaler.app.disruption import DisruptionService, Options
from autoscaler.domain.disruption import Settings
from autoscaler.domain.durations import duration_seconds
from autoscaler.handlers.observability import logger, metrics, tracer
from autoscaler.handlers.runtime import Runtime, get_runtime

# Seconds kept back from the Lambda's remaining time for the final API calls and metric flush.
MARGIN_SECONDS = 10.0


def options_for(rt: Runtime, *, dry_run: bool | None = None) -> Options:
    cfg = rt.config.disruption
    return Options(
        dry_run=cfg.dry_run if dry_run is None else dry_run,
        settings=Settings(allow_bare_pods=cfg.allow_bare_pods,
                          spot_to_spot_consolidation=cfg.spot_to_spot_consolidation,
                          node_repair=cfg.node_repair, drift=cfg.drift,
                          forceful_expiry=cfg.expiry == "Forceful"),
        blocked_drain_timeout=duration_seconds(cfg.blocked_drain_timeout),
        replacement_timeout=duration_seconds(cfg.replacement_timeout),
        drain_seconds_per_pass=cfg.drain_seconds_per_pass,
        adopt_karpenter=rt.config.migration.adopt_karpenter_nodes,
    )


def service_for(rt: Runtime, *, dry_run: bool | None = None) -> DisruptionService:
    options = options_for(rt, dry_run=dry_run)
    # Kept by the container, so unadopted Karpenter nodes are logged when their set changes, not every run.
    if rt.warm.karpenter_nodes is None:
        rt.warm.karpenter_nodes = KarpenterNodes(cloud=rt.cloud, sink=rt.sink, adopt=options.adopt_karpenter)
    karpenter = rt.warm.karpenter_nodes
    return DisruptionService(
        cluster=rt.cluster, cloud=rt.cloud, node_pools=rt.node_pools, node_classes=rt.node_classes,
        cluster_name=rt.config.cluster_name, region=rt.config.region, clock=rt.clock, sink=rt.sink,
        options=options, replacements=rt.replacement_requester(), karpenter=karpenter,
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
    # The pass's first reads of pods and nodes catch the container's cache up until the watch is quiet (as
    # current as a list taken then), or list (cold container, last list older than the resync period, 410,
    # not quiet in time); its later reads (the snapshot after its drains) catch up likewise
    # (adapters/kube/informer.py; why this is safe: docs/disruption.md).
    rt.cluster_cache().catch_up()
    report = service_for(rt, dry_run=dry_run).run_pass(deadline=deadline)
    logger.info("disruption pass done", extra={"report": report.to_json()})
    return report.to_json()
