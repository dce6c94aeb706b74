"""Watch mode: after the first pass, keep a pending-pod watch open for the rest of the invocation and run
another provisioner pass per batch of new pending pods (Karpenter's batching window: 1 s idle, 10 s max).

The watch is opened *before* the first pass, so a pod created while that pass runs is not missed; a
daemon thread pumps the watch into a queue the batching loop reads with timeouts. ``on_pass`` is called
as each pass ends (the handler writes that pass's decision log line and metrics then), so what a pass
did is in CloudWatch seconds later and survives a timeout later in the invocation.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from autoscaler.app.pass_report import PassResult
from autoscaler.app.ports import ClusterPort
from autoscaler.app.provisioner import Provisioner, ReplacementRequest
from autoscaler.domain.models import Pod
from autoscaler.domain.plan import Plan

log = logging.getLogger("autoscaler.app.provisioner")
PassHook = Callable[[PassResult], None]


def open_watch(provisioner: Provisioner, *, seconds: float) -> PendingPodWatch:
    """Start watching pending pods now (in a thread) for ``seconds``. Open it *before* the first pass,
    so a pod created while that pass runs is not missed."""
    return PendingPodWatch(provisioner.cluster, seconds=seconds, deadline=provisioner.clock.monotonic() + seconds)


def watch(provisioner: Provisioner, watcher: PendingPodWatch, *, first: PassResult | None = None,
          deadline: float | None = None, on_pass: PassHook | None = None) -> list[PassResult]:
    """Run a pass per batch of new pending pods until the watch's deadline. Pods the previous pass
    already considered do not start a batch: their status updates would otherwise re-trigger a pass for
    nothing."""
    mono = provisioner.clock.monotonic
    results: list[PassResult] = []
    seen = _pod_ids(first.plan) if first is not None else set()
    try:
        while (left := watcher.deadline - mono()) > 0:
            try:
                pod = watcher.events.get(timeout=left)
            except queue.Empty:
                break
            if pod is None:
                break
            if pod.key in seen:
                continue
            batch = {pod.key}
            watch_ended = _collect(provisioner, watcher, batch, seen)
            result = provisioner.run_pass(reason=f"watch ({len(batch)} new pod(s))", deadline=deadline)
            results.append(result)
            if on_pass is not None:
                on_pass(result)
            seen = _pod_ids(result.plan) | seen
            if watch_ended:
                break
    finally:
        watcher.close()
    return results


def _collect(provisioner: Provisioner, watcher: PendingPodWatch, batch: set[str], seen: set[str]) -> bool:
    """Add pods to ``batch`` until IDLE passes without a new one or MAX since the first; returns whether
    the watch ended meanwhile."""
    mono, settings = provisioner.clock.monotonic, provisioner.settings
    start = mono()
    last = start
    while True:
        wait = min(last + settings.batch_idle, start + settings.batch_max, watcher.deadline) - mono()
        if wait <= 0:
            return False
        try:
            pod = watcher.events.get(timeout=wait)
        except queue.Empty:
            return False
        if pod is None:
            return True
        if pod.key not in seen and pod.key not in batch:
            batch.add(pod.key)
            last = mono()


class PendingPodWatch:
    """A pending-pod watch pumped into a queue by a daemon thread; ``None`` in the queue means it ended."""

    def __init__(self, cluster: ClusterPort, *, seconds: float, deadline: float) -> None:
        self.deadline = deadline
        self.events: queue.Queue[Pod | None] = queue.Queue()
        self._stop = threading.Event()
        self._cluster = cluster
        self._thread = threading.Thread(target=self._pump, args=(max(1.0, seconds),), name="pending-pod-watch",
                                        daemon=True)
        self._thread.start()

    def _pump(self, seconds: float) -> None:
        try:
            for pod in self._cluster.watch_pending_pods(timeout_seconds=seconds):
                if self._stop.is_set():
                    return
                self.events.put(pod)
        except Exception as exc:  # any end of the watch thread: logged; the next scheduled run picks up what it missed
            log.warning("pending-pod watch ended: %s", exc)
        finally:
            self.events.put(None)

    def close(self) -> None:
        self._stop.set()


def _pod_ids(plan: Plan) -> set[str]:
    keys = set(plan.existing)
    keys.update(u.pod for u in plan.unschedulable)
    for launch in plan.launches:
        keys.update(launch.pods)
    return keys


def run_invocation(provisioner: Provisioner, *, watch_seconds: float,
                   replacement: ReplacementRequest | None = None,
                   mark_unavailable: Callable[[str, str, str], None] | None = None,
                   deadline: float | None = None, on_pass: PassHook | None = None,
                   reason: str = "scheduled", woken: bool = False) -> list[PassResult]:
    """One Lambda invocation: a replacement pass or a scheduled (or woken: ``reason``) pass, then watch
    mode when ``watch_seconds`` > 0. ``deadline``: when the invocation ends (the clock's monotonic time);
    ``on_pass``: called with each pass's result as soon as that pass ends; ``woken``: a watcher's wake-up
    (``Provisioner.run_pass``)."""
    watcher = open_watch(provisioner, seconds=watch_seconds) if watch_seconds > 0 else None
    try:
        if replacement is not None:
            mark = mark_unavailable or provisioner.cloud.mark_unavailable
            for instance_type, zone, capacity_type in replacement.unavailable:
                mark(instance_type, zone, capacity_type)
            first = provisioner.run_pass(
                reason=f"replacement ({replacement.source} {replacement.event_id})".strip(),
                leaving_nodes=replacement.nodes, deadline=deadline, woken=woken)
        else:
            first = provisioner.run_pass(reason=reason, deadline=deadline, woken=woken)
    except BaseException:  # close the watch whatever stops the pass, then let it propagate unchanged
        if watcher is not None:
            watcher.close()
        raise
    results = [first]
    if on_pass is not None:
        try:
            on_pass(first)
        except BaseException:  # as above: the watch is closed, the error propagates unchanged
            if watcher is not None:
                watcher.close()
            raise
    if watcher is not None:
        # The watch was opened before the first pass (and its window counts from then).
        results += watch(provisioner, watcher, first=first, deadline=deadline, on_pass=on_pass)
    return results
