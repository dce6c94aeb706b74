"""Watch mode in virtual time (simulator/sim/watch.py): newly unschedulable pods batched by Karpenter's
window (1 s idle, 10 s max) into one provisioner invocation per batch, without AWS or an API server."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.kube_store import WatchEvent
from simulator.sim.engine import EventLoop
from simulator.sim.watch import WatchTrigger, provisionable

UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def pod(name: str, *, conditions: list[dict[str, Any]] | None = None, node: str | None = None,
        owner: str = "ReplicaSet", deleting: bool = False, phase: str = "Pending") -> dict[str, Any]:
    # Owner references as controllers write them (``controller: true``).
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}",
                            "ownerReferences": [{"kind": owner, "name": "o", "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [UNSCHEDULABLE] if conditions is None else conditions}}


@pytest.mark.parametrize(("case", "obj", "expected"), [
    ("unschedulable", pod("a"), True),
    ("not yet tried by kube-scheduler", pod("a", conditions=[]), False),
    ("bound", pod("a", node="n1"), False),
    ("terminating", pod("a", deleting=True), False),
    ("finished", pod("a", phase="Succeeded"), False),
    ("DaemonSet pod", pod("a", owner="DaemonSet"), False),
])
def test_provisionable_as_karpenter_decides(case: str, obj: dict[str, Any], expected: bool) -> None:
    assert provisionable(obj) is expected, case


def _world(idle: float = 1.0, most: float = 10.0) -> tuple[EventLoop, WatchTrigger, list[tuple[float, int]]]:
    loop = EventLoop(epoch=0.0)
    calls: list[tuple[float, int]] = []
    trigger = WatchTrigger(loop, lambda wake: calls.append((loop.now, wake.pods)), idle=idle, max=most)
    return loop, trigger, calls


def _arrive(loop: EventLoop, trigger: WatchTrigger, at: float, obj: dict[str, Any]) -> None:
    loop.at(at, "pod", lambda: trigger.observe(WatchEvent(0, "pods", "MODIFIED", obj)))


def test_a_burst_is_one_batch_closed_after_one_idle_second() -> None:
    # Given three pods going unschedulable within half a second, and the first one updated again later
    loop, trigger, calls = _world()
    for i, t in enumerate((5.0, 5.2, 5.5)):
        _arrive(loop, trigger, t, pod(f"p{i}"))
    _arrive(loop, trigger, 20.0, pod("p0"))
    # When virtual time passes
    loop.run_until(60)
    # Then one invocation for the three, 1 s after the last arrived; the update starts no batch
    assert calls == [(6.5, 3)]
    assert trigger.batches == 1


def test_a_steady_trickle_is_cut_at_the_batch_maximum() -> None:
    # Given a new unschedulable pod every half second for 30 s
    loop, trigger, calls = _world()
    for i in range(60):
        _arrive(loop, trigger, 10.0 + i * 0.5, pod(f"p{i}"))
    # When virtual time passes
    loop.run_until(60)
    # Then each batch closes 10 s (the maximum) after its first pod (10.0 and 20.5), the last one 1 s after
    # the trickle ends (39.5)
    assert [t for t, _ in calls] == [20.0, 30.5, 40.5]
    assert sum(n for _, n in calls) == 60


def test_pods_that_are_not_provisionable_start_no_batch() -> None:
    # Given only a DaemonSet pod, a pod kube-scheduler has not tried yet and a bound pod
    loop, trigger, calls = _world()
    for obj in (pod("ds", owner="DaemonSet"), pod("new", conditions=[]), pod("bound", node="n1")):
        _arrive(loop, trigger, 1.0, obj)
    loop.run_until(60)
    # Then the provisioner is not invoked
    assert calls == []


def _node(name: str, *, ready: bool, tainted: bool, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"} if labels is None else labels},
            "spec": {"taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}] if tainted else []},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_the_watchers_node_stream_wakes_once_per_node_and_reason_with_the_newest_pod_version() -> None:
    # Given the watcher function's trigger (nodes on) and a pod it saw at version 7
    loop = EventLoop(epoch=0.0)
    wakes: list[tuple[float, str, str]] = []
    trigger = WatchTrigger(loop, lambda w: wakes.append((loop.now, w.reason, w.resource_version)), idle=1.0,
                           nodes=True)
    bound = {**pod("p", node="n0"), "metadata": {"name": "p", "resourceVersion": "7"}}
    loop.at(1.0, "pod", lambda: trigger.observe(WatchEvent(7, "pods", "MODIFIED", bound)))
    # When our node registers (tainted), is untainted, becomes Ready, heartbeats, and is initialised; and a node
    # of another node group registers and becomes Ready
    steps = [(30.0, _node("n1", ready=False, tainted=True)), (31.0, _node("n1", ready=False, tainted=False)),
             (40.0, _node("n1", ready=True, tainted=False)), (50.0, _node("n1", ready=True, tainted=False)),
             (60.0, _node("n1", ready=True, tainted=False, labels={"karpenter.sh/nodepool": "default",
                                                                   "karpenter.sh/initialized": "true"})),
             (70.0, _node("mng", ready=True, tainted=True, labels={}))]
    for at, obj in steps:
        loop.at(at, "node", lambda obj=obj: trigger.observe(WatchEvent(9, "nodes", "MODIFIED", obj)))
    loop.run_until(120)
    # Then one wake-up on registration and one on Ready, each carrying the pod's version (never a node's)
    assert wakes == [(31.0, "1 node(s) registered", "7"), (41.0, "1 node(s) ready", "7")]


def test_the_in_process_watch_ignores_nodes() -> None:
    # Given the trigger of reaction: watch (no node stream), when a node of ours registers
    loop, trigger, calls = _world()
    loop.at(1.0, "node", lambda: trigger.observe(WatchEvent(1, "nodes", "ADDED", _node("n1", ready=True,
                                                                                          tainted=True))))
    loop.run_until(60)
    # Then nothing is invoked
    assert calls == []
