"""A pass after a burst plans almost nothing: every pending pod is held by the in-flight instance launched for it
(its node claim) or nominated to an existing node, so no class has pods left to place, and the planner does no
spread or affinity counting for them (that counting walks every bound pod: at 50,000 pods it was most of a
second pass's plan CPU)."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.models import LabelSelector, Node, Pod, TopologySpreadConstraint
from autoscaler.domain.plan import InFlightNode
from autoscaler.domain.scheduling import plan
from autoscaler.domain.scheduling.topology import Topology
from tests.domain.scheduling_world import GI, ZONES, check_plan, pod, world

ZONE = "topology.kubernetes.io/zone"
SPREAD = (TopologySpreadConstraint(1, ZONE, "DoNotSchedule", LabelSelector(match_labels=(("app", "web"),))),)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the planner's matching-pod counts (the real method runs; only the calls are recorded)."""
    calls: list[int] = []
    real = Topology.matching_counts

    def counted(self: Topology, *args: Any, **kwargs: Any) -> dict[str, int]:
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Topology, "matching_counts", counted)
    return calls


def _world(extra: int) -> tuple[Any, list[Pod]]:
    """Six zone-spread pods held by three in-flight instances (two each, one instance per zone), a running
    node with bound pods of the same app, and ``extra`` pending pods no instance was launched for."""
    pods = [pod(f"web-{i}", cpu=500, memory=GI // 2, app="web", topology_spread=SPREAD) for i in range(6 + extra)]
    bound = [pod(f"old-{i}", cpu=100, memory=GI // 8, app="web", node_name="n1") for i in range(20)]
    node = Node("n1", labels={ZONE: ZONES[0], "kubernetes.io/hostname": "n1"},
                allocatable={"cpu": 4000, "memory": 16 * GI, "pods": 110}, ready=True)
    flights = [InFlightNode(f"i-0{z}", "default", "m5.large", zone, "spot",
                            pod_keys=(f"default/web-{2 * z}", f"default/web-{2 * z + 1}"))
               for z, zone in enumerate(ZONES)]
    return world([*pods, *bound], nodes=[node], in_flight=flights), pods


def test_a_pass_whose_pending_pods_are_all_held_counts_no_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN every pending pod held by the in-flight instance launched for it
    calls = _counting(monkeypatch)
    snap, pods = _world(extra=0)
    # WHEN the pass plans
    result = plan(snap)
    check_plan(snap, result)
    # THEN each pod goes back onto its instance, nothing launches, and no spread was counted
    assert result.existing == {p.key: f"i-0{int(p.name.split('-')[1]) // 2}" for p in pods}
    assert result.launches == [] and result.unschedulable == []
    assert calls == []


def test_a_pod_left_to_place_is_still_spread_with_counting(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the same, plus one pending pod no instance holds
    calls = _counting(monkeypatch)
    snap, pods = _world(extra=1)
    result = plan(snap)
    check_plan(snap, result)
    # THEN that pod is placed by the spread (its class is counted), the held ones stay on their instances
    assert calls
    assert {k: v for k, v in result.existing.items() if k != "default/web-6"} == {
        p.key: f"i-0{int(p.name.split('-')[1]) // 2}" for p in pods[:6]}
    assert "default/web-6" in result.existing or any("default/web-6" in ln.pods for ln in result.launches)
