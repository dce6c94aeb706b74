"""The pure disruption decisions: cron windows, budgets, guards, PDB arithmetic and the choice of
candidates, on the small scheduling world (no I/O)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from autoscaler.domain.cron import CronError, parse_cron, window_open
from autoscaler.domain.disruption import (
    DisruptionInput,
    Settings,
    allowed_disruptions,
    decide,
    disruptions_allowed,
    guard_for,
)
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.models import InstanceType, LabelSelector, Node, Offering, OwnerRef, Pod, PodDisruptionBudget
from autoscaler.domain.nodepool import parse_node_pool
from autoscaler.domain.plan import PlanInput
from tests.domain.scheduling_world import GI, NODE_CLASS, ON_DEMAND, pod, pool, world

NOW = 1_700_000_000.0


def _at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("expr", "when", "want"), [
    ("* * * * *", "2024-03-04 10:17", True),
    ("0 9 * * 1-5", "2024-03-04 09:00", True),  # Monday
    ("0 9 * * 1-5", "2024-03-09 09:00", False),  # Saturday
    ("0 9 * * mon-fri", "2024-03-08 09:00", True),
    ("*/15 * * * *", "2024-03-04 10:30", True),
    ("*/15 * * * *", "2024-03-04 10:31", False),
    ("0 0 1 jan *", "2024-01-01 00:00", True),
    ("0 0 13 * 5", "2024-03-01 00:00", True),  # both day fields restricted: either matches (a Friday)
    ("0 0 13 * 5", "2024-03-13 00:00", True),
    ("0 0 13 * 5", "2024-03-12 00:00", False),
    ("0 0 * * 7", "2024-03-03 00:00", True),  # 7 is Sunday too
    ("@daily", "2024-03-03 00:00", True),
    ("@hourly", "2024-03-03 05:01", False),
    ("10-20/5 * * * *", "2024-03-03 05:15", True),
    ("1,2,3 * * * *", "2024-03-03 05:04", False),
])
def test_cron_matching(expr: str, when: str, want: bool) -> None:
    assert parse_cron(expr).matches(_at(when)) is want


@pytest.mark.parametrize(("expr", "message"), [
    ("* * * *", "5 fields"), ("61 * * * *", "minute field: 61"), ("* 24 * * *", "hour field"),
    ("* * 0 * *", "day-of-month"), ("* * * foo *", "month field"), ("*/0 * * * *", "step"),
    ("5-1 * * * *", "backwards"),
])
def test_bad_cron_is_named(expr: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse_cron(expr)


@pytest.mark.parametrize(("schedule", "duration", "now", "want"), [
    ("0 9 * * *", 8 * 3600, "2024-03-04 09:00", True),
    ("0 9 * * *", 8 * 3600, "2024-03-04 16:59", True),
    ("0 9 * * *", 8 * 3600, "2024-03-04 17:00", False),
    ("0 9 * * *", 8 * 3600, "2024-03-04 08:59", False),
    ("0 22 * * *", 4 * 3600, "2024-03-05 01:30", True),  # a window across midnight
])
def test_budget_windows(schedule: str, duration: int, now: str, want: bool) -> None:
    assert window_open(schedule, duration, _at(now)) is want


def test_nodepool_rejects_a_bad_budget_schedule() -> None:
    with pytest.raises(ConfigError, match="schedule"):
        _pool(budgets=[{"nodes": "1", "schedule": "0 25 * * *", "duration": "1h"}])


def _pool(name: str = "default", *, budgets: list[dict[str, Any]] | None = None, after: str = "30s",
          policy: str = "WhenEmptyOrUnderutilized", expire: str = "720h", spot: bool = False) -> Any:
    reqs: list[dict[str, Any]] = [{"key": "karpenter.k8s.aws/instance-family", "operator": "In",
                                   "values": ["m5", "c5", "r5"]}]
    if spot:
        reqs.append({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]})
    disruption: dict[str, Any] = {"consolidationPolicy": policy, "consolidateAfter": after}
    if budgets is not None:
        disruption["budgets"] = budgets
    return parse_node_pool({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
                            "spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}, "requirements": reqs,
                                                           "expireAfter": expire}},
                                     "disruption": disruption}})


@pytest.mark.parametrize(("budgets", "reason", "count", "now", "want"), [
    (None, "Empty", 5, "2024-03-04 10:00", 1),  # default 10%, rounded up
    (None, "Empty", 30, "2024-03-04 10:00", 3),
    ([{"nodes": "0"}], "Empty", 5, "2024-03-04 10:00", 0),
    ([{"nodes": "50%"}, {"nodes": "1"}], "Expired", 10, "2024-03-04 10:00", 1),  # the strictest applies
    ([{"nodes": "0", "reasons": ["Underutilized"]}], "Empty", 4, "2024-03-04 10:00", 4),  # other reason only
    ([{"nodes": "0", "reasons": ["Underutilized"]}], "Underutilized", 4, "2024-03-04 10:00", 0),
    ([{"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}, {"nodes": "2"}], "Empty", 9,
     "2024-03-04 12:00", 0),  # business hours: no disruption
    ([{"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}, {"nodes": "2"}], "Empty", 9,
     "2024-03-04 18:00", 2),
])
def test_allowed_disruptions(budgets: Any, reason: Any, count: int, now: str, want: int) -> None:
    assert allowed_disruptions(_pool(budgets=budgets), reason, node_count=count, now=_at(now)) == want


def _node(name: str, itype: str = "m5.large", *, pool: str = "default", ct: str = "on-demand", age: float = 3600,
          annotations: dict[str, str] | None = None, alloc_cpu: int = 1930, alloc_mem: int = 7 * GI) -> Node:
    return Node(name=name, labels={"karpenter.sh/nodepool": pool, "node.kubernetes.io/instance-type": itype,
                                   "topology.kubernetes.io/zone": "us-east-1a", "karpenter.sh/capacity-type": ct,
                                   "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                                   "kubernetes.io/hostname": name},
                annotations=annotations or {}, allocatable={"cpu": alloc_cpu, "memory": alloc_mem, "pods": 29},
                provider_id=f"aws:///us-east-1a/i-{name}", ready=True, created_at=NOW - age)


def _bound(name: str, node: str, cpu: int = 250, memory: int = GI // 4, *, ready: bool = True,
           **kw: Any) -> Pod:
    owner = kw.pop("owner", "keep")
    made = pod(name, cpu, memory, node_name=node, phase="Running", ready=ready, created_at=NOW - 3600, **kw)
    return made if owner == "keep" else replace(made, owner=owner)


WEB = PodDisruptionBudget("default", "web", LabelSelector(match_labels=(("app", "web"),)), min_available=2)


@pytest.mark.parametrize(("pods", "node_annotations", "settings", "want"), [
    ([], {}, Settings(), None),
    ([], {"karpenter.sh/do-not-disrupt": "true"}, Settings(), "DoNotDisrupt"),
    ([_bound("a-0", "n", annotations={"karpenter.sh/do-not-disrupt": "true"})], {}, Settings(), "DoNotDisrupt"),
    ([_bound("a-0", "n", annotations={"karpenter.sh/do-not-disrupt": "false"})], {}, Settings(), None),
    ([_bound("bare", "n", owner=None)], {}, Settings(), "BarePod"),
    ([_bound("bare", "n", owner=None)], {}, Settings(allow_bare_pods=True), None),
    ([_bound("ds", "n", owner=OwnerRef("DaemonSet", "ds", controller=True), annotations={
        "karpenter.sh/do-not-disrupt": "true"})], {}, Settings(), None),  # daemon pods do not move
    ([_bound("web-0", "n", app="web"), _bound("web-1", "m", app="web")], {}, Settings(), "PDB"),
    ([_bound("web-0", "n", app="web"), _bound("web-1", "m", app="web"), _bound("web-2", "m", app="web")], {},
     Settings(), None),
])
def test_guards(pods: list[Pod], node_annotations: dict[str, str], settings: Settings, want: str | None) -> None:
    node = _node("n", annotations=node_annotations)
    got = guard_for(node, [p for p in pods if p.node_name == "n"], pdbs=[WEB], all_pods=pods, settings=settings)
    assert (got[0] if got else None) == want


@pytest.mark.parametrize(("spec", "ready", "want"), [
    ({"min_available": 2}, 3, 1), ({"min_available": "50%"}, 3, 1), ({"max_unavailable": 1}, 3, 1),
    ({"max_unavailable": "0%"}, 3, 0), ({"min_available": 3}, 2, 0), ({}, 3, 0),
])
def test_pdb_arithmetic(spec: dict[str, Any], ready: int, want: int) -> None:
    budget = PodDisruptionBudget("default", "web", LabelSelector(match_labels=(("app", "web"),)), **spec)
    pods = [_bound(f"web-{i}", "n", app="web", ready=i < ready) for i in range(3)]
    assert disruptions_allowed(budget, pods)[0] == want


def _decide(nodes: list[Node], pods: list[Pod], *, pools: list[Any] | None = None, empty_since: Any = None,
            settings: Settings | None = None, owned: Any = None, pdbs: Any = ()) -> Any:
    snap = world(pods, pools=pools or [_pool()], nodes=nodes)
    return decide(DisruptionInput(snapshot=snap, pdbs=list(pdbs), now=NOW,
                                  owned_instances=owned if owned is not None else {n.instance_id for n in nodes},
                                  empty_since=empty_since or {}, settings=settings or Settings()))


def test_empty_needs_the_annotation_for_consolidate_after() -> None:
    nodes = [_node("a"), _node("b"), _node("c")]
    got = _decide(nodes, [], empty_since={"a": NOW - 31, "b": NOW - 29}, pools=[_pool(budgets=[{"nodes": "5"}])])
    assert [(c.reason, c.nodes) for c in got.candidates] == [("Empty", ("a",))]
    assert got.candidates[0].saving == ON_DEMAND["m5.large"]


def test_expired_plans_replacement_capacity() -> None:
    nodes = [_node("old", age=800 * 3600)]
    got = _decide(nodes, [_bound("web-0", "old", cpu=1000), _bound("web-1", "old", cpu=500)])
    [c] = got.candidates
    assert (c.reason, c.action, c.pods) == ("Expired", "replace", ("default/web-0", "default/web-1"))
    assert len(c.replacements) == 1 and c.price_after > 0


def test_when_empty_policy_never_consolidates() -> None:
    nodes = [_node("a"), _node("b")]
    pods = [_bound("x-0", "a"), _bound("y-0", "b")]
    assert _decide(nodes, pods, pools=[_pool(policy="WhenEmpty")]).candidates == []
    assert _decide(nodes, pods).candidates != []


def test_consolidation_waits_for_consolidate_after_since_the_last_pod() -> None:
    nodes = [_node("a"), _node("b")]
    fresh = [pod("x-0", 250, GI // 4, node_name="a", phase="Running", ready=True, created_at=NOW - 10),
             _bound("y-0", "b")]
    got = _decide(nodes, fresh)
    assert [c.nodes for c in got.candidates] == [("b",)]  # a changed 10 s ago; b's pod fits on a


def test_pending_pods_protect_the_nodes_they_would_land_on() -> None:
    nodes = [_node("a")]
    got = _decide(nodes, [pod("waiting-0", 250, GI // 4)], empty_since={"a": NOW - 3600})
    assert got.candidates == []


def test_spot_is_not_replaced_by_spot_unless_enabled() -> None:
    nodes = [_node("a", "m5.xlarge", ct="spot", alloc_cpu=3920, alloc_mem=14 * GI)]
    pods = [_bound("x-0", "a", cpu=500)]
    pools = [_pool(spot=True)]
    assert _decide(nodes, pods, pools=pools).candidates == []
    # Enabled, but the small world has fewer than 15 cheaper spot types: Karpenter's rule keeps the node
    # (wave 1 replaced it here, which could repeat with every spot type EC2 picked).
    assert _decide(nodes, pods, pools=pools, settings=Settings(spot_to_spot_consolidation=True)).candidates == []


def _small(i: int) -> str:
    """A distinct general-purpose type name (m5a.large, m5b.large, ..., m7f.large) Karpenter's default
    requirements allow."""
    return f"m{5 + i // 7}{'abcdefg'[i % 7]}.large"


def _spot_world(cheaper_types: int, nodes: list[Node], pods: list[Pod]) -> PlanInput:
    """A node type (m5.4xlarge) and ``cheaper_types`` small types that are each cheaper on spot."""
    big = InstanceType("m5.4xlarge", "amd64", vcpus=16, memory_mib=65536, max_enis=8, ipv4_per_eni=30,
                       hypervisor="nitro")
    small = [InstanceType(_small(i), "amd64", vcpus=2, memory_mib=8192, max_enis=3, ipv4_per_eni=10,
                          hypervisor="nitro") for i in range(cheaper_types)]
    offers = [Offering("m5.4xlarge", "us-east-1a", "spot", 0.30)]
    offers += [Offering(t.name, "us-east-1a", "spot", round(0.02 + 0.001 * i, 4)) for i, t in enumerate(small)]
    spot_pool = pool(requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])
    return PlanInput(node_pools=[spot_pool], node_classes={"default": NODE_CLASS}, pods=pods, nodes=nodes,
                     instance_types=[big, *small], offerings=offers)


@pytest.mark.parametrize(("cheaper_types", "replaced"), [(14, False), (15, True), (20, True)])
def test_single_node_spot_to_spot_needs_15_cheaper_types_and_launches_the_15_cheapest(
        cheaper_types: int, replaced: bool) -> None:
    # Karpenter pkg/controllers/disruption/consolidation.go computeSpotToSpotConsolidation
    nodes = [_node("a", "m5.4xlarge", ct="spot", alloc_cpu=15_890, alloc_mem=57 * GI)]
    pods = [_bound("x-0", "a", cpu=500)]
    snap = _spot_world(cheaper_types, nodes, pods)
    got = decide(DisruptionInput(snapshot=snap, pdbs=[], now=NOW, owned_instances={"i-a"}, empty_since={},
                                 settings=Settings(spot_to_spot_consolidation=True)))
    if not replaced:
        assert got.candidates == []
        return
    [c] = got.candidates
    [launch] = c.replacements
    assert c.action == "replace" and launch.capacity_type == "spot"
    assert list(launch.instance_types) == [_small(i) for i in range(15)]


def test_not_owned_instances_are_blocked() -> None:
    got = _decide([_node("a")], [], empty_since={"a": NOW - 3600}, owned=set())
    assert got.candidates == [] and [(b.node, b.guard) for b in got.blocked] == [("a", "NotOurs")]


def test_nodes_of_unknown_pools_are_ignored() -> None:
    got = _decide([_node("a", pool="someone-else")], [], empty_since={"a": NOW - 3600})
    assert got.candidates == [] and got.blocked == []


def test_single_node_consolidation_picks_the_most_saving_per_disrupted_pod() -> None:
    # Three m5.large; each one's pods would fit on the others, but only one may go per pass.
    nodes = [_node("a"), _node("b"), _node("c")]
    pods = [_bound("x-0", "a", memory=3 * GI), _bound("y-0", "b", memory=3 * GI), _bound("y-1", "b", memory=GI),
            _bound("z-0", "c", memory=3 * GI), _bound("z-1", "c", memory=GI), _bound("z-2", "c", memory=GI // 2)]
    got = _decide(nodes, pods, pools=[_pool(budgets=[{"nodes": "1"}])])
    [c] = got.candidates
    assert c.nodes == ("a",) and c.action == "delete"
