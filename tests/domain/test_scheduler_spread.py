"""Topology spread details: ScheduleAnyway as a preference, minDomains, node affinity/taints policies,
and how the pod spec fields are parsed."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.models import (
    LabelSelector,
    Node,
    NodeSelectorTerm,
    Pod,
    Requirement,
    Taint,
    TopologySpreadConstraint,
)
from autoscaler.domain.objects import ObjectError, pod_from_dict
from autoscaler.domain.plan import Plan
from autoscaler.domain.scheduling import plan
from tests.domain.scheduling_world import GI, check_plan, pod, world

ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
APP = LabelSelector(match_labels=(("app", "web"),))
IN_A = (NodeSelectorTerm((Requirement(ZONE, "In", ("us-east-1a",)),)),)


def solve(pods: list[Pod], **kw: Any) -> Plan:
    snap = world(pods, **kw)
    result = plan(snap)
    check_plan(snap, result)
    return result


def per_zone(result: Plan) -> dict[str, int]:
    out: dict[str, int] = {}
    for ln in result.launches:
        assert len(ln.zones) == 1
        out[ln.zones[0]] = out.get(ln.zones[0], 0) + len(ln.pods)
    return out


def spread_pods(n: int, tsc: TopologySpreadConstraint, **kw: Any) -> list[Pod]:
    return [pod(f"web-{i}", 500, GI // 2, app="web", topology_spread=(tsc,), **kw) for i in range(n)]


@pytest.mark.parametrize(("when", "affinity_policy", "placed_in_a", "unschedulable"), [
    # Honor (default): only zone a is a domain for a pod whose affinity allows only zone a.
    ("DoNotSchedule", "Honor", 3, 0),
    # Ignore: zones b and c count with 0 pods, so zone a may hold only maxSkew of them.
    ("DoNotSchedule", "Ignore", 1, 2),
    # ScheduleAnyway: a preference, relaxed when it cannot be met.
    ("ScheduleAnyway", "Ignore", 3, 0),
])
def test_spread_node_affinity_policy_and_schedule_anyway(when: str, affinity_policy: str, placed_in_a: int,
                                                         unschedulable: int) -> None:
    tsc = TopologySpreadConstraint(1, ZONE, when, APP, node_affinity_policy=affinity_policy)  # type: ignore[arg-type]
    result = solve(spread_pods(3, tsc, required_node_affinity=IN_A))
    assert per_zone(result) == {"us-east-1a": placed_in_a}
    assert len(result.unschedulable) == unschedulable
    if unschedulable:
        assert "maxSkew 1 would be exceeded" in result.unschedulable[0].reason


@pytest.mark.parametrize("when", ["DoNotSchedule", "ScheduleAnyway"])
def test_schedule_anyway_is_satisfied_when_it_can_be(when: str) -> None:
    tsc = TopologySpreadConstraint(1, ZONE, when, APP)  # type: ignore[arg-type]
    result = solve(spread_pods(6, tsc))
    assert per_zone(result) == {"us-east-1a": 2, "us-east-1b": 2, "us-east-1c": 2}
    assert not result.unschedulable


@pytest.mark.parametrize(("min_domains", "when", "placed", "unschedulable"), [
    (None, "DoNotSchedule", 6, 0),
    (3, "DoNotSchedule", 6, 0),
    # 5 domains asked, 3 exist: the global minimum counts as 0, so each zone takes maxSkew pods.
    (5, "DoNotSchedule", 3, 3),
    # minDomains applies to DoNotSchedule only.
    (5, "ScheduleAnyway", 6, 0),
])
def test_min_domains(min_domains: int | None, when: str, placed: int, unschedulable: int) -> None:
    tsc = TopologySpreadConstraint(1, ZONE, when, APP, min_domains=min_domains)  # type: ignore[arg-type]
    result = solve(spread_pods(6, tsc))
    assert sum(per_zone(result).values()) == placed
    assert len(result.unschedulable) == unschedulable
    assert all(v <= 2 for v in per_zone(result).values())


@pytest.mark.parametrize(("taints_policy", "expect"), [
    # Ignore (default): the tainted node is a domain and its two matching pods count.
    ("Ignore", {"us-east-1b": 2, "us-east-1c": 2}),
    # Honor: the pod does not tolerate the taint, so that node and its pods do not count.
    ("Honor", {"us-east-1a": 2, "us-east-1b": 1, "us-east-1c": 1}),
])
def test_spread_node_taints_policy(taints_policy: str, expect: dict[str, int]) -> None:
    node = Node("n1", labels={ZONE: "us-east-1a", HOST: "n1"}, allocatable={"cpu": 0, "memory": 0, "pods": 0},
                taints=(Taint("dedicated", "db", "NoSchedule"),), ready=True)
    running = [pod(f"web-old-{i}", app="web", node_name="n1", phase="Running") for i in range(2)]
    tsc = TopologySpreadConstraint(1, ZONE, "DoNotSchedule", APP, node_taints_policy=taints_policy)  # type: ignore[arg-type]
    result = solve([*running, *spread_pods(4, tsc)], nodes=[node])
    assert per_zone(result) == expect


def _pod_with_spread(**extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c"}], "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}, **extra}]}}


def test_parse_spread_policies_and_min_domains() -> None:
    default = pod_from_dict(_pod_with_spread()).topology_spread[0]
    assert (default.min_domains, default.node_affinity_policy, default.node_taints_policy) == (None, "Honor", "Ignore")
    tsc = pod_from_dict(_pod_with_spread(minDomains=4, nodeAffinityPolicy="Ignore",
                                         nodeTaintsPolicy="Honor")).topology_spread[0]
    assert (tsc.min_domains, tsc.node_affinity_policy, tsc.node_taints_policy) == (4, "Ignore", "Honor")


@pytest.mark.parametrize(("extra", "field"), [
    ({"nodeTaintsPolicy": "Sometimes"}, "topologySpreadConstraints[0].nodeTaintsPolicy"),
    ({"nodeAffinityPolicy": "honor"}, "topologySpreadConstraints[0].nodeAffinityPolicy"),
    ({"minDomains": 0}, "topologySpreadConstraints[0].minDomains"),
])
def test_parse_spread_bad_fields_name_the_field(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(ObjectError, match=field.replace("[", r"\[").replace("]", r"\]")):
        pod_from_dict(_pod_with_spread(**extra))


def test_labels_no_selector_reads_do_not_split_pods_into_classes() -> None:
    """A StatefulSet's pods differ in ``statefulset.kubernetes.io/pod-name``, a Job's in their index: labels no
    selector looks at. Planning them as one class gives the plan it gives without those labels (one class per
    pod made planning quadratic in pods); a label a selector does look at still tells pods apart."""
    from dataclasses import replace

    from autoscaler.domain.scheduling.pod_class import class_key as _class_key
    from autoscaler.domain.scheduling.pod_class import selected_label_keys

    tsc = TopologySpreadConstraint(max_skew=1, topology_key=ZONE, when_unsatisfiable="DoNotSchedule",
                                   label_selector=APP)
    plain = spread_pods(9, tsc)
    unique = [replace(p, labels={**p.labels, "statefulset.kubernetes.io/pod-name": p.name}) for p in plain]
    keys = selected_label_keys(unique)
    assert keys == {"app"}
    assert len({_class_key(p, keys) for p in unique}) == 1 < len({_class_key(p) for p in unique})
    assert per_zone(solve(unique)) == per_zone(solve(plain)) == {"us-east-1a": 3, "us-east-1b": 3, "us-east-1c": 3}
    tiered = [replace(p, labels={**p.labels, "tier": str(i % 2)}) for i, p in enumerate(plain)]
    by_tier = TopologySpreadConstraint(max_skew=1, topology_key=ZONE, when_unsatisfiable="DoNotSchedule",
                                       label_selector=LabelSelector(match_labels=(("tier", "0"),)))
    tiered[0] = replace(tiered[0], topology_spread=(tsc, by_tier))
    keys = selected_label_keys(tiered)
    assert keys == {"app", "tier"} and len({_class_key(p, keys) for p in tiered}) == 3
