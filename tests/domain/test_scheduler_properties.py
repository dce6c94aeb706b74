"""Property test: on random workloads every plan places each pending pod exactly once, every listed
instance type fits its node, and spread / anti-affinity / node selection constraints hold."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.domain.models import (
    LabelSelector,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    Requirement,
    TopologySpreadConstraint,
)
from autoscaler.domain.scheduling import plan
from tests.domain.scheduling_world import GI, MI, check_plan, pod, world

KINDS = ("plain", "zone-spread", "host-spread", "anti", "zone-affinity", "arm", "selector", "prefer-anti")


@st.composite
def workloads(draw: st.DrawFn) -> list[Pod]:
    pods: list[Pod] = []
    for d in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(KINDS))
        app = f"app{d}"
        sel = LabelSelector(match_labels=(("app", app),))
        cpu = draw(st.sampled_from((100, 250, 500, 1000, 1500, 3000)))
        mem = draw(st.sampled_from((100 * MI, 512 * MI, GI, 2 * GI, 4 * GI)))
        kw: dict[str, object] = {}
        if kind == "zone-spread":
            kw["topology_spread"] = (TopologySpreadConstraint(1, "topology.kubernetes.io/zone", "DoNotSchedule", sel),)
        elif kind == "host-spread":
            kw["topology_spread"] = (TopologySpreadConstraint(draw(st.integers(1, 3)), "kubernetes.io/hostname",
                                                              "DoNotSchedule", sel),)
        elif kind == "anti":
            kw["pod_anti_affinity"] = (PodAffinityTerm(sel, "kubernetes.io/hostname"),)
        elif kind == "prefer-anti":  # honoured while it can be, relaxed after; never leaves a pod out
            kw["preferred_pod_anti_affinity"] = ((draw(st.integers(1, 100)), PodAffinityTerm(
                sel, draw(st.sampled_from(("kubernetes.io/hostname", "topology.kubernetes.io/zone"))))),)
        elif kind == "zone-affinity":
            kw["pod_affinity"] = (PodAffinityTerm(sel, "topology.kubernetes.io/zone"),)
        elif kind == "arm":
            kw["required_node_affinity"] = (NodeSelectorTerm((Requirement("kubernetes.io/arch", "In", ("arm64",)),)),)
        elif kind == "selector":
            kw["node_selector"] = {"karpenter.k8s.aws/instance-family": draw(st.sampled_from(("m5", "c5", "x1")))}
        for i in range(draw(st.integers(1, 25))):
            pods.append(pod(f"{app}-{i}", cpu, mem, app=app, **kw))  # type: ignore[arg-type]
    return pods


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(0, 3))
def test_every_plan_is_valid(pods: list[Pod], seed: int) -> None:
    snap = world(pods, seed=seed)
    result = plan(snap)
    check_plan(snap, result)
    zone_counts: dict[str, dict[str, int]] = {}
    for ln in result.launches:
        for key in ln.pods:
            app = key.split("/")[1].rsplit("-", 1)[0]
            p = next(x for x in pods if x.key == key)
            for r in (t for term in p.required_node_affinity for t in term.requirements):
                assert all(name.startswith("m6g") for name in ln.instance_types)
                assert r.values == ("arm64",)
            for k, v in p.node_selector.items():
                assert all(name.split(".")[0] == v for name in ln.instance_types), (k, v)
            if p.topology_spread and p.topology_spread[0].topology_key.endswith("zone"):
                assert len(ln.zones) == 1
                zone_counts.setdefault(app, {})
                zone_counts[app][ln.zones[0]] = zone_counts[app].get(ln.zones[0], 0) + 1
            if p.pod_affinity:
                assert len(ln.zones) == 1
    for counts in zone_counts.values():
        values = [counts.get(z, 0) for z in ("us-east-1a", "us-east-1b", "us-east-1c")]
        assert max(values) - min(values) <= 1
    for u in result.unschedulable:
        assert u.reason
        p = next(x for x in pods if x.key == u.pod)
        assert not p.preferred_pod_anti_affinity or "exceed" in u.reason, u.reason
