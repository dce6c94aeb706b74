"""One owner for every piece of node state: the disruption function never continues, releases or
terminates what the interruption function started, and the provisioner stops treating a node as leaving
once it has planned that node's replacement. Each test is a defect of the wave-1 code, where the three
functions read each other's annotations without an owner."""

from __future__ import annotations

import copy
from typing import Any

from autoscaler.app.interruption import InterruptionService
from autoscaler.domain.interruption import InterruptionEvent, parse_event
from autoscaler.domain.keys import DRAIN_STARTED_ANNOTATION, OWNER_ANNOTATION, REPLACEMENT_REQUESTED_ANNOTATION
from autoscaler.domain.node_state import Owner, read_state
from autoscaler.handlers import provisioner
from simulator.local import LambdaContext
from tests.adapters.aws.helpers import CLUSTER
from tests.app.fakes import Replacements
from tests.events import load_event


def _event(name: str, instance_id: str) -> InterruptionEvent:
    raw = copy.deepcopy(load_event(name))
    raw["detail"]["instance-id"] = instance_id
    raw["resources"] = [instance_id]
    if "affectedEntities" in raw["detail"]:
        raw["detail"]["affectedEntities"] = [{"entityValue": instance_id}]
    parsed = parse_event(raw)
    assert isinstance(parsed, InterruptionEvent)
    return parsed


def _interruption(w: Any) -> InterruptionService:
    return InterruptionService(cluster=w.cluster, cloud=w.cloud, replacements=Replacements(), clock=w.clock,
                               cluster_name=CLUSTER.name)


def test_a_rebalance_tainted_node_is_not_drained_by_the_disruption_function(make_world: Any) -> None:
    # GIVEN a node the interruption function tainted for a rebalance recommendation (action "taint":
    # nothing is evicted, docs/interruption.md) and room for its pods on another node
    w = make_world()
    iid = w.launch("m5.large")
    tainted = w.register(iid)
    roomy = w.node("m5.xlarge", annotations={"karpenter.sh/do-not-disrupt": "true"})
    w.pod("web-0", tainted)
    w.pod("web-1", roomy)
    [outcome] = _interruption(w).begin(_event("rebalance-recommendation", iid))
    assert outcome.outcome.value == "tainted" and outcome.replacement_requested

    # WHEN the disruption function runs, long after the replacement registered
    for _ in range(3):
        w.clock.advance(120)
        report = w.run()

    # THEN the node keeps its pods and its instance: the replacement request is not the disruption's
    assert w.state(iid) == "running" and w.pods_on(tainted) == ["web-0"]
    assert not w.nodes()[tainted]["spec"].get("unschedulable")
    assert tainted not in report["removed"] + report["draining"] + report["replacing"]
    assert read_state(w.nodes()[tainted]["metadata"]["annotations"]).owner is Owner.INTERRUPTION


def test_a_pdb_blocked_scheduled_change_drain_is_not_released_by_the_disruption_function(make_world: Any) -> None:
    # GIVEN a node cordoned for an AWS Health scheduled change whose drain a PDB blocks
    w = make_world(blockedDrainTimeout="1m", drainSecondsPerPass=10)
    iid = w.launch("m5.large")
    retiring = w.register(iid)
    other = w.node("m5.large", annotations={"karpenter.sh/do-not-disrupt": "true"})
    w.pod("web-0", retiring, labels={"app": "web"})
    w.pod("web-1", other, labels={"app": "web"})
    w.store.create("poddisruptionbudgets", {"metadata": {"name": "web", "namespace": "default"},
                                            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})
    [outcome] = _interruption(w).begin(_event("health-scheduled-change", iid))
    assert outcome.outcome.value == "cordoned"

    # WHEN the disruption function runs well past its own blockedDrainTimeout
    released = []
    for _ in range(4):
        w.clock.advance(60)
        released += w.run()["released"]

    # THEN the node stays cordoned and tainted for the interruption function's retries (docs/interruption.md)
    node = w.nodes()[retiring]
    assert released == [] and node["spec"].get("unschedulable")
    assert DRAIN_STARTED_ANNOTATION in node["metadata"]["annotations"]
    assert node["metadata"]["annotations"][OWNER_ANNOTATION] == "interruption"
    assert w.pods_on(retiring) == ["web-0"] and w.state(iid) == "running"


def test_pending_pods_return_to_zero_once_a_replacement_is_planned(make_world: Any) -> None:
    # GIVEN a node whose replacement the interruption function asked for (a rebalance recommendation)
    w = make_world()
    iid = w.launch("m5.large")
    leaving = w.register(iid)
    w.pod("web-0", leaving)
    w.pod("web-1", leaving)
    _interruption(w).begin(_event("rebalance-recommendation", iid))
    assert REPLACEMENT_REQUESTED_ANNOTATION in w.nodes()[leaving]["metadata"]["annotations"]

    def pass_() -> dict[str, Any]:
        result: dict[str, Any] = provisioner.handler({"source": "schedule", "kind": "provisioner", "watch": False},
                                                     LambdaContext(function_name="provisioner", remaining_ms=60_000))
        [only] = result["passes"]
        return only

    # WHEN the provisioner plans the replacement, then runs again before the node is drained
    first = pass_()
    second = pass_()

    # THEN the first pass places the node's two pods and the second sees no pending pod (the node is an
    # ordinary node again until it is drained), and nothing more is launched
    assert first["pendingPods"] == 2 and len(first["launched"]) == 1
    assert second["pendingPods"] == 0 and second["launched"] == []
    state = read_state(w.nodes()[leaving]["metadata"]["annotations"])
    assert state.replacement_provisioned == state.replacement_requested and not state.awaiting_replacement


def test_a_node_the_interruption_function_takes_while_a_pass_decides_is_left_to_it(make_world: Any,
                                                                                 monkeypatch: Any) -> None:
    # GIVEN an empty node of ours, seen empty by a first pass and past consolidateAfter by the second
    w = make_world()
    iid = w.launch("m5.large")
    name = w.register(iid)
    w.run()
    w.clock.advance(60)
    # AND the interruption function taints it for a rebalance recommendation after the second pass took its
    # (cached) view of the cluster, just as the pass announces it is removing the node
    record_event = w.cluster.record_event
    raced: list[str] = []

    def racing(target: Any, **kw: Any) -> bool:
        if kw.get("reason") == "DisruptionTerminating" and not raced:
            [outcome] = _interruption(w).begin(_event("rebalance-recommendation", iid))
            raced.append(outcome.outcome.value)
        return bool(record_event(target, **kw))

    monkeypatch.setattr(w.cluster, "record_event", racing)
    # WHEN that pass goes on to drain the node it decided on
    report = w.run()
    # THEN it read the node's record again before writing its own: the node is the interruption function's,
    # keeps its instance, and is neither removed nor drained by this pass
    assert raced == ["tainted"]
    assert report["decisions"] and report["decisions"][0]["reason"] == "Empty"
    assert name not in report["removed"] + report["draining"] and w.state(iid) == "running"
    assert read_state(w.nodes()[name]["metadata"]["annotations"]).owner is Owner.INTERRUPTION
