"""The simulation's kube-scheduler: the oracle (``simulator/sim/scheduler.py``) run against the API emulator's
store, binding what it places and reporting what it cannot place as kube-scheduler does."""

from __future__ import annotations

from typing import Any

from simulator.sim.scheduler import Decision, Obj, Snapshot, Strategy, Volumes, pod_key, schedule, wants_scheduling


class KubeScheduler:
    """The oracle run against the emulator's store: binds through the pods/binding subresource and
    marks pods it cannot place ``PodScheduled=False, reason=Unschedulable`` (what the autoscaler and
    Karpenter watch for), rewriting the condition only when its message changes."""

    def __init__(self, store: Any, *, strategy: Strategy = "LeastAllocated") -> None:
        self.store, self.strategy = store, strategy
        self.bound: list[tuple[str, str]] = []  # (pod key, node) in binding order, for the report
        self.next_start = 0  # kube-scheduler's nextStartNodeIndex, kept from one run to the next

    def run(self) -> list[Decision]:
        pods = self.store.view("pods")
        pending = [p for p in pods if wants_scheduling(p)]
        if not pending:
            return []
        snapshot = Snapshot(self.store.view("nodes"), pods,
                            Volumes.of(self.store.view("persistentvolumeclaims"),
                                       self.store.view("persistentvolumes")),
                            self.store.view("namespaces"))
        by_key = {pod_key(p): p for p in pending}
        snapshot.start = self.next_start % len(snapshot.nodes) if snapshot.nodes else 0
        decisions = schedule(pending, snapshot, strategy=self.strategy)
        self.next_start = snapshot.start
        for d in decisions:
            ns, name = d.pod.split("/", 1)
            if d.node is not None:
                self.store.bind(ns, name, d.node, echo=False)
                self.bound.append((d.pod, d.node))
            else:
                self._mark_unschedulable(by_key[d.pod], d.message)
        return decisions

    def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        conditions = list((pod.get("status") or {}).get("conditions") or ())
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current and current.get("status") == "False" and current.get("message") == message:
            return
        conditions = [c for c in conditions if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message})
        self.store.patch("pods", pod["metadata"].get("namespace", "default"), pod["metadata"]["name"],
                         {"status": {"conditions": conditions}}, echo=False)
