"""Provisioner Lambda: EventBridge Scheduler runs it on its schedule (``{"source": "schedule", "kind":
"provisioner"}``: every 5 minutes as a safety pass with the watcher, every minute otherwise); the watcher
function wakes it asynchronously per batch of unschedulable pods (``{"source": "watcher", ...}``); the
interruption and disruption functions invoke it asynchronously with a replacement request. One call into
``autoscaler.app.provisioner``; with ``reaction: watch`` it keeps running until shortly before the next
scheduled run."""

from __future__ import annotations

from typing import Any, Literal

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoscaler.app.pass_report import PassResult
from autoscaler.app.provisioner import (
    Provisioner,
    ProvisionerSettings,
    ReplacementRequest,
)
from autoscaler.app.watch import run_invocation
from autoscaler.config import ProvisionerConfig
from autoscaler.domain.durations import duration_seconds
from autoscaler.domain.keys import KARPENTER_TERMINATION_FINALIZER
from autoscaler.handlers.observability import flush_metrics, logger, metrics, tracer
from autoscaler.handlers.runtime import Runtime, get_runtime

# Time kept back from the Lambda timeout for the last pass (plan + CreateFleet + lifecycle).
FINAL_PASS_RESERVE_SECONDS = 20.0


class ProvisionerEvent(BaseModel):
    """The invocation payload. Unknown keys are ignored: EventBridge adds its own."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    source: str = "schedule"
    kind: Literal["provisioner", "replacement"] = "provisioner"
    nodes: list[str] = Field(default_factory=list)
    unavailable: list[tuple[str, str, str]] = Field(default_factory=list)
    event_id: str = Field(default="", alias="eventId")
    dry_run: bool | None = Field(default=None, alias="dryRun")
    watch: bool | None = None  # override the configured watch mode (local runs, the demo)
    reason: str = ""  # the watcher's wake-up: why, and for how many pods
    pods: int = 0
    # The watcher's wake-up: the newest pod resourceVersion of its batch (the pass's view must include it).
    resource_version: str = Field(default="", alias="resourceVersion")


def parse_event(event: Any) -> ProvisionerEvent:
    """The payload, or ValueError naming each bad field."""
    try:
        return ProvisionerEvent.model_validate(event if isinstance(event, dict) else {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(payload)'}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"provisioner payload rejected: {problems}") from None


def provisioner_for(runtime: Runtime, *, dry_run: bool) -> Provisioner:
    """One service per container and dry-run flag (it keeps the event de-duplication memory warm)."""
    services = runtime.warm.provisioners
    if dry_run not in services:
        cfg = runtime.config
        settings = ProvisionerSettings(
            cluster_name=cfg.cluster_name, region=cfg.region, dry_run=dry_run,
            registration_timeout=float(duration_seconds(cfg.provisioner.registration_timeout)),
            release_finalizers=(KARPENTER_TERMINATION_FINALIZER,) if cfg.migration.adopt_karpenter_nodes else (),
            batch_idle=cfg.provisioner.batch_idle_seconds, batch_max=cfg.provisioner.batch_max_seconds,
        )
        services[dry_run] = Provisioner(cluster=runtime.cluster, cloud=runtime.cloud, node_pools=runtime.node_pools,
                                        node_classes=runtime.node_classes, settings=settings, clock=runtime.clock,
                                        sink=runtime.sink, claims=runtime.claims)
    return services[dry_run]


def wants_watch(cfg: ProvisionerConfig, payload: ProvisionerEvent) -> bool:
    """Whether this invocation keeps a watch open after its pass: only with ``reaction: watch`` (or the
    payload's override), never for a watcher's wake-up (the watcher is the watch)."""
    if payload.watch is not None:
        return payload.watch
    return cfg.mode == "watch" and payload.source != "watcher"


def pass_reason(payload: ProvisionerEvent) -> str:
    """The first pass's reason in the decision log."""
    return f"watcher ({payload.reason or f'{payload.pods} pod(s)'})" if payload.source == "watcher" else "scheduled"


def watch_seconds(runtime: Runtime, context: Any, *, enabled: bool) -> float:
    """How long to keep watching: the configured window, cut to the invocation's remaining time."""
    if not enabled:
        return 0.0
    wanted = float(runtime.config.provisioner.watch_seconds or
                   runtime.config.provisioner.period_seconds - runtime.config.provisioner.watch_margin_seconds)
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining_ms):
        wanted = min(wanted, remaining_ms() / 1000.0 - FINAL_PASS_RESERVE_SECONDS)
    return max(0.0, wanted)


def sync_cluster_cache(runtime: Runtime, payload: ProvisionerEvent, *, watch: bool) -> bool:
    """How current this invocation's pods and nodes must be (docs/provisioner.md, "The warm cluster cache"):
    a watcher's wake-up catches the warm cache up to its resourceVersion; every other invocation (the
    scheduled pass, a replacement request, a wake-up without a version) catches it up until the watch is
    quiet, or lists when the cache is cold, its last list is older than the resync period or the catch-up
    fails; a watch-mode invocation lists on every read, as before the cache. Whether this is a woken pass
    (it also describes only its claims' instances before CreateFleet)."""
    cache = runtime.cluster_cache()
    woken = not watch and payload.kind == "provisioner" and payload.source == "watcher" \
        and bool(payload.resource_version)
    if watch:
        cache.list_always()
    elif woken:
        cache.expect(payload.resource_version)
    else:
        cache.catch_up()
    return woken


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    runtime = get_runtime()
    try:
        payload = parse_event(event)
    except ValueError as exc:
        # Retrying cannot fix a bad payload; pending pods are still served by a normal pass.
        logger.error(str(exc))
        payload = ProvisionerEvent()
    cfg = runtime.config.provisioner
    dry_run = cfg.dry_run if payload.dry_run is None else payload.dry_run
    replacement = None
    if payload.kind == "replacement":
        replacement = ReplacementRequest(source=payload.source, nodes=tuple(payload.nodes),
                                         unavailable=tuple(payload.unavailable), event_id=payload.event_id)
    watch_enabled = wants_watch(cfg, payload)
    woken = sync_cluster_cache(runtime, payload, watch=watch_enabled)
    service = provisioner_for(runtime, dry_run=dry_run)
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    deadline = runtime.clock.monotonic() + remaining_ms() / 1000.0 if callable(remaining_ms) else None
    passes: list[dict[str, Any]] = []
    results = run_invocation(service, watch_seconds=watch_seconds(runtime, context, enabled=watch_enabled),
                             replacement=replacement, deadline=deadline,
                             reason=pass_reason(payload), woken=woken,
                             on_pass=lambda result: passes.append(publish_pass(result)))
    assert len(passes) == len(results)
    return {"passes": passes}


def publish_pass(result: PassResult) -> dict[str, Any]:
    """Write one pass's decision log line and flush its metrics as the pass ends, not when the (watch
    mode: ~50 s) invocation does: they reach CloudWatch while the invocation runs and survive its timeout."""
    detail = result.to_json()
    # The decision log: one line a person reads, with the structured detail alongside.
    logger.info(result.summary(), extra={"decision": {k: v for k, v in detail.items() if k != "summary"}})
    flush_metrics()
    return detail
