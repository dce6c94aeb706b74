"""Watcher Lambda (128 MB): EventBridge Scheduler starts one invocation per period; each keeps a watch of
unbound pods (and of our nodes waiting for initialisation) open until shortly before its timeout (the period
plus a short overlap, so the next one is already watching) and wakes the provisioner function asynchronously
per batch of newly unschedulable pods and newly registered or Ready nodes.

Imports are kept to what this needs (boto3, through the adapters, for the wake-up and the EKS token, the
Kubernetes client, the watcher service): no planner, no pydantic, no Powertools, no cluster file; settings
come from environment variables the stack sets (``autoscaler/watcher_settings.py``). The service, and so the watch's
resourceVersion and the set of pods already woken for, is kept while the container is warm.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from autoscaler.adapters.aws._calls import client_config
from autoscaler.adapters.aws.replacement import LambdaProvisionerWaker
from autoscaler.adapters.aws.session import aws_session
from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.auth import api_client_from_environ
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.adapters.kube.node_watch import KubeNodeWatch
from autoscaler.app.pod_watcher import PendingPodWatcher, WatcherSettings
from autoscaler.app.ports import Clock
from autoscaler.watcher_settings import END_RESERVE_SECONDS, WatcherEnv

log = logging.getLogger("autoscaler.handlers.watcher")
logging.getLogger("autoscaler").setLevel(os.environ.get("AUTOSCALER_LOG_LEVEL", "INFO"))
# Without a context (local runs): watch this long.
DEFAULT_RUN_SECONDS = 60.0

_SERVICE: PendingPodWatcher | None = None


def build_watcher(*, environ: Mapping[str, str] | None = None, session: Any = None,
                  clock: Clock | None = None) -> PendingPodWatcher:
    """The service with its adapters; arguments override the environment (tests, the benchmark)."""
    env = os.environ if environ is None else environ
    settings = WatcherEnv.from_environ(env)
    session = session or aws_session(settings.region)
    clock = clock or SystemClock()
    api = api_client_from_environ(env, cluster_name=settings.cluster_name, session=session,
                                  region=settings.region, clock=clock)
    # A short read timeout: a wake-up that cannot be queued fast is logged, the safety pass covers it.
    waker = LambdaProvisionerWaker(session.client("lambda", region_name=settings.region,
                                                  config=client_config(max_attempts=3, read_timeout=5.0)),
                                   function_name=settings.provisioner_function)
    cluster = KubeCluster(api, clock=clock)
    return PendingPodWatcher(pods=cluster, nodes=KubeNodeWatch(cluster), waker=waker, clock=clock,
                             settings=WatcherSettings(batch_idle=settings.batch_idle, batch_max=settings.batch_max))


def set_watcher(service: PendingPodWatcher | None) -> None:
    """Install (or clear) the container's service: tests and the benchmark."""
    global _SERVICE  # noqa: PLW0603 - one service per Lambda container is the point
    _SERVICE = service


def handler(event: Any, context: Any) -> dict[str, Any]:
    global _SERVICE  # noqa: PLW0603
    if _SERVICE is None:
        _SERVICE = build_watcher()
    service = _SERVICE
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    seconds = remaining_ms() / 1000.0 - END_RESERVE_SECONDS if callable(remaining_ms) else DEFAULT_RUN_SECONDS
    run = service.run(until=service.clock.monotonic() + max(0.0, seconds))
    summary = {"wakes": run.wakes, "wokenPods": run.woken_pods, "wokenNodes": run.woken_nodes,
               "events": run.events, "lists": run.lists, "errors": run.errors, "wakeFailures": run.wake_failures,
               "waitingPods": len(service.provisionable), "waitingNodes": len(service.woken_nodes),
               "resourceVersion": service.resource_version}
    # One line per invocation (one per period): the watcher's whole idle log volume.
    log.info("watcher run %s", json.dumps(summary, separators=(",", ":")))
    if not run.connected:
        # Fails the invocation, so the Errors alarm fires: the watch never reached the API server.
        raise RuntimeError("the watcher could not list or watch pods for its whole run; the warnings above "
                           "say why (RBAC: apply the ApplyRbacCommand output; network: the VPC settings)")
    return summary
