"""Scheduling semantics, each with a satisfied and a violated case, on a small real-shaped catalog."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.models import (
    DaemonSet,
    HostPort,
    LabelSelector,
    Node,
    NodeSelectorTerm,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodAffinityTerm,
    Requirement,
    StorageClass,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)
from autoscaler.domain.objects import pod_from_dict
from autoscaler.domain.plan import InFlightNode, Plan
from autoscaler.domain.scheduling import plan
from tests.domain.scheduling_world import GI, ZONES, check_plan, offerings, pod, pool, world

SPOT_OD = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]
HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
APP = LabelSelector(match_labels=(("app", "web"),))


def solve(pods: list[Pod], **kw: Any) -> Plan:
    snap = world(pods, **kw)
    result = plan(snap)
    check_plan(snap, result)
    return result


def reasons(result: Plan) -> list[str]:
    return [u.reason for u in result.unschedulable]


def pods_of(n: int, **kw: Any) -> list[Pod]:
    return [pod(f"web-{i}", app="web", **kw) for i in range(n)]


# --- resources ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cpu", "launched", "reason"), [
    (1000, 1, None), (100_000, 0, "exceed the largest instance type"),
])
def test_resource_requests(cpu: int, launched: int, reason: str | None) -> None:
    result = solve([pod("a-0", cpu)])
    assert len(result.launches) == launched
    if reason:
        assert reason in reasons(result)[0] and "NodePool default" in reasons(result)[0]


@pytest.mark.parametrize(("init_cpu", "overhead", "smallest_vcpus", "placed"), [
    ("3", None, 4, True), ("1", {"cpu": "2500m"}, 4, True), ("100", None, 0, False),
])
def test_init_containers_and_overhead(init_cpu: str, overhead: dict[str, str] | None, smallest_vcpus: int,
                                      placed: bool) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}],
                            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": init_cpu}}}]}
    if overhead:
        spec["overhead"] = overhead
    p = pod_from_dict({"metadata": {"name": "x", "namespace": "default"}, "spec": spec})
    result = solve([p])
    assert bool(result.launches) is placed
    if placed:
        vcpus = {"c5.xlarge": 4, "m5.xlarge": 4, "r5.xlarge": 4, "m5.2xlarge": 8, "m5.4xlarge": 16}
        assert all(vcpus.get(t, 0) >= smallest_vcpus for t in result.launches[0].instance_types)


@pytest.mark.parametrize(("requirements", "placed"), [
    ([{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["p"]}, *SPOT_OD], True),
    (SPOT_OD, False),
])
def test_gpu_requests(requirements: list[dict[str, Any]], placed: bool) -> None:
    result = solve([pod("gpu-0", extra={"nvidia.com/gpu": 1})], pools=[pool(requirements=requirements)])
    assert bool(result.launches) is placed
    if placed:
        assert result.launches[0].instance_types == ("p3.2xlarge",)
    else:
        assert "exceed the largest instance type" in reasons(result)[0]


# --- node selection ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("labels", "placed"), [({"intent": "apps"}, True), ({}, False)])
def test_node_selector_against_template_labels(labels: dict[str, str], placed: bool) -> None:
    result = solve([pod("nginx-0", node_selector={"intent": "apps"})],
                   pools=[pool(labels=labels, requirements=SPOT_OD)])
    assert bool(result.launches) is placed
    if placed:
        assert result.launches[0].labels["intent"] == "apps"
    else:
        assert "intent" in reasons(result)[0]


def _affinity(*reqs: Requirement) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm(reqs),)


ANY_ARCH = [*SPOT_OD, {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]


@pytest.mark.parametrize(("req", "expect_types", "placed"), [
    (Requirement("kubernetes.io/arch", "In", ("arm64",)), {"m6g.large"}, True),
    (Requirement("kubernetes.io/arch", "In", ("s390x",)), set(), False),
    (Requirement("karpenter.k8s.aws/instance-family", "NotIn", ("m5", "c5", "m6g")), {"r5.large", "r5.xlarge"}, True),
    (Requirement("karpenter.k8s.aws/instance-cpu", "Gt", ("4",)), {"m5.2xlarge", "m5.4xlarge"}, True),
    (Requirement("karpenter.k8s.aws/instance-cpu", "Gt", ("64",)), set(), False),
    (Requirement("karpenter.k8s.aws/instance-cpu", "Lt", ("4",)),
     {"c5.large", "m5.large", "r5.large", "m6g.large"}, True),
    (Requirement("karpenter.k8s.aws/instance-gpu-count", "Exists"), None, True),
    (Requirement("example.com/team", "Exists"), set(), False),
    (Requirement("example.com/team", "DoesNotExist"), None, True),
    (Requirement(ZONE, "In", ("us-east-1b",)), None, True),
    (Requirement(ZONE, "In", ("eu-west-1a",)), set(), False),
])
def test_required_node_affinity_operators(req: Requirement, expect_types: set[str] | None, placed: bool) -> None:
    result = solve([pod("a-0", 500, GI // 2, required_node_affinity=_affinity(req))],
                   pools=[pool(requirements=ANY_ARCH)])
    assert bool(result.launches) is placed, reasons(result)
    if placed and expect_types is not None:
        assert set(result.launches[0].instance_types) == expect_types
    if req.key == ZONE and placed:
        assert result.launches[0].zones == ("us-east-1b",)


def test_required_terms_are_ored() -> None:
    terms = (NodeSelectorTerm((Requirement("kubernetes.io/arch", "In", ("s390x",)),)),
             NodeSelectorTerm((Requirement("kubernetes.io/arch", "In", ("arm64",)),)))
    result = solve([pod("a-0", 500, GI // 2, required_node_affinity=terms)], pools=[pool(requirements=ANY_ARCH)])
    assert result.launches[0].instance_types == ("m6g.large",)


@pytest.mark.parametrize(("zone", "expect"), [("us-east-1b", ("us-east-1b",)), ("eu-west-1a", ZONES)])
def test_preferred_affinity_required_first_then_relaxed(zone: str, expect: tuple[str, ...]) -> None:
    pref = ((10, NodeSelectorTerm((Requirement(ZONE, "In", (zone,)),))),)
    result = solve([pod("a-0", preferred_node_affinity=pref)])
    assert result.launches[0].zones == expect


def test_custom_label_from_nodepool_requirement() -> None:
    reqs = [*SPOT_OD, {"key": "example.com/team", "operator": "In", "values": ["a", "b"]}]
    ok = solve([pod("a-0", node_selector={"example.com/team": "b"})], pools=[pool(requirements=reqs)])
    assert ok.launches[0].labels["example.com/team"] == "b"
    bad = solve([pod("a-0", node_selector={"example.com/team": "c"})], pools=[pool(requirements=reqs)])
    assert "conflicts with the NodePool's requirements" in reasons(bad)[0]


# --- taints --------------------------------------------------------------------------------------------

TAINT = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]


@pytest.mark.parametrize(("tolerations", "placed"), [
    ((Toleration("dedicated", "Equal", "gpu", "NoSchedule"),), True),
    ((Toleration("dedicated", "Exists"),), True),
    ((Toleration("dedicated", "Equal", "cpu"),), False),
    ((), False),
])
def test_taints_need_tolerations(tolerations: tuple[Toleration, ...], placed: bool) -> None:
    result = solve([pod("a-0", tolerations=tolerations)], pools=[pool(taints=TAINT, requirements=SPOT_OD)])
    assert bool(result.launches) is placed
    if placed:
        assert result.launches[0].taints == (Taint("dedicated", "NoSchedule", "gpu"),)
    else:
        assert "taint dedicated=gpu:NoSchedule not tolerated" in reasons(result)[0]


def test_startup_taints_need_no_toleration() -> None:
    result = solve([pod("a-0")], pools=[pool(startup_taints=[{"key": "cni-not-ready", "effect": "NoSchedule"}],
                                             requirements=SPOT_OD)])
    assert result.launches[0].startup_taints == (Taint("cni-not-ready", "NoSchedule"),)


# --- topology spread -----------------------------------------------------------------------------------

def _zones_count(result: Plan) -> dict[str, int]:
    out: dict[str, int] = {}
    for ln in result.launches:
        assert len(ln.zones) == 1 and ln.labels[ZONE] == ln.zones[0]
        out[ln.zones[0]] = out.get(ln.zones[0], 0) + len(ln.pods)
    return out


@pytest.mark.parametrize("when", ["DoNotSchedule", "ScheduleAnyway"])
def test_zone_spread_balances(when: str) -> None:
    spread = (TopologySpreadConstraint(1, ZONE, when, APP),)  # type: ignore[arg-type]
    result = solve(pods_of(7, topology_spread=spread))
    counts = _zones_count(result)
    assert sorted(counts.values()) == [2, 2, 3]


def test_zone_spread_counts_existing_pods() -> None:
    node = Node("n1", labels={ZONE: "us-east-1a", HOST: "n1"}, allocatable={"cpu": 0, "memory": 0, "pods": 0},
                ready=True)
    existing = [pod(f"web-old-{i}", app="web", node_name="n1", phase="Running") for i in range(2)]
    spread = (TopologySpreadConstraint(1, ZONE, "DoNotSchedule", APP),)
    result = solve([*existing, *pods_of(4, topology_spread=spread)], nodes=[node])
    assert _zones_count(result) == {"us-east-1b": 2, "us-east-1c": 2}


@pytest.mark.parametrize("skew", [1, 2])
def test_hostname_spread(skew: int) -> None:
    spread = (TopologySpreadConstraint(skew, HOST, "DoNotSchedule", APP),)
    result = solve(pods_of(6, topology_spread=spread, cpu=100, memory=GI // 8))
    assert len(result.launches) == 6 // skew
    assert all(len(ln.pods) <= skew for ln in result.launches)


def test_capacity_type_spread() -> None:
    spread = (TopologySpreadConstraint(1, "karpenter.sh/capacity-type", "DoNotSchedule", APP),)
    result = solve(pods_of(4, topology_spread=spread))
    per_ct: dict[str, int] = {}
    for ln in result.launches:
        per_ct[ln.capacity_type] = per_ct.get(ln.capacity_type, 0) + len(ln.pods)
    assert per_ct == {"spot": 2, "on-demand": 2}


# --- pod affinity / anti-affinity, host ports ----------------------------------------------------------

def test_hostname_anti_affinity_one_per_node_and_avoids_matching_existing() -> None:
    node = Node("n1", labels={ZONE: "us-east-1a", HOST: "n1"}, allocatable={"cpu": 8000, "memory": 32 * GI,
                                                                            "pods": 50}, ready=True)
    running = pod("web-old", app="web", node_name="n1", phase="Running")
    anti = (PodAffinityTerm(APP, HOST),)
    result = solve([running, *pods_of(3, pod_anti_affinity=anti, cpu=100, memory=GI // 8)], nodes=[node])
    assert result.existing == {}
    assert len(result.launches) == 3
    # without the matching pod the existing node takes one of them
    result = solve(pods_of(3, pod_anti_affinity=anti, cpu=100, memory=GI // 8), nodes=[node])
    assert list(result.existing.values()) == ["n1"]
    assert len(result.launches) == 2


def test_zone_anti_affinity_one_per_zone() -> None:
    anti = (PodAffinityTerm(APP, ZONE),)
    result = solve(pods_of(4, pod_anti_affinity=anti))
    assert sorted(z for ln in result.launches for z in ln.zones) == list(ZONES)
    assert reasons(result) == ["pod anti-affinity on zone: every allowed zone already has a matching pod"]


def test_hostname_affinity_follows_matching_pod() -> None:
    node = Node("n1", labels={ZONE: "us-east-1a", HOST: "n1"}, allocatable={"cpu": 8000, "memory": 32 * GI,
                                                                            "pods": 50}, ready=True)
    db = pod("db-0", app="db", node_name="n1", phase="Running")
    aff = (PodAffinityTerm(LabelSelector(match_labels=(("app", "db"),)), HOST),)
    result = solve([db, *pods_of(2, pod_affinity=aff)], nodes=[node])
    assert result.existing == {"default/web-0": "n1", "default/web-1": "n1"}
    result = solve(pods_of(2, pod_affinity=aff))
    assert reasons(result) == ["pod affinity on hostname: no pod matches its required podAffinity"] * 2


def test_zone_self_affinity_keeps_pods_together() -> None:
    aff = (PodAffinityTerm(APP, ZONE),)
    result = solve(pods_of(12, pod_affinity=aff, cpu=1000))
    assert len({z for ln in result.launches for z in ln.zones}) == 1


def test_preferred_hostname_anti_affinity_is_honoured_when_it_can_be() -> None:
    prefer = ((100, PodAffinityTerm(APP, HOST)),)
    result = solve(pods_of(3, preferred_pod_anti_affinity=prefer, cpu=100, memory=GI // 8))
    assert sorted(len(ln.pods) for ln in result.launches) == [1, 1, 1]
    assert reasons(result) == []
    # the same pods without the preference share one node
    assert len(solve(pods_of(3, cpu=100, memory=GI // 8)).launches) == 1


def test_preferred_zone_anti_affinity_is_relaxed_for_the_pods_it_cannot_place() -> None:
    prefer = ((50, PodAffinityTerm(APP, ZONE)),)
    result = solve(pods_of(5, preferred_pod_anti_affinity=prefer, cpu=1000))
    assert reasons(result) == []  # required, two of these would be unschedulable
    assert sum(len(ln.pods) for ln in result.launches) == 5
    assert {z for ln in result.launches for z in ln.zones} == set(ZONES)


def test_preferred_hostname_affinity_follows_a_matching_pod_else_is_relaxed() -> None:
    node = Node("n1", labels={ZONE: "us-east-1a", HOST: "n1"}, allocatable={"cpu": 8000, "memory": 32 * GI,
                                                                            "pods": 50}, ready=True)
    other = Node("n0", labels={ZONE: "us-east-1b", HOST: "n0"}, allocatable={"cpu": 8000, "memory": 32 * GI,
                                                                             "pods": 50}, ready=True)
    db = pod("db-0", app="db", node_name="n1", phase="Running")
    prefer = ((10, PodAffinityTerm(LabelSelector(match_labels=(("app", "db"),)), HOST)),)
    result = solve([db, *pods_of(2, preferred_pod_affinity=prefer)], nodes=[other, node])
    assert result.existing == {"default/web-0": "n1", "default/web-1": "n1"}
    # no pod matches: required would leave both pending; preferred places them
    result = solve(pods_of(2, preferred_pod_affinity=prefer))
    assert reasons(result) == [] and sum(len(ln.pods) for ln in result.launches) == 2


def test_relaxing_preferences_keeps_the_real_reason_when_nothing_fits() -> None:
    prefer = ((10, PodAffinityTerm(APP, HOST)),)
    result = solve([pod("web-0", 100_000, app="web", preferred_pod_anti_affinity=prefer)])
    assert len(reasons(result)) == 1 and "exceed the largest instance type" in reasons(result)[0]


@pytest.mark.parametrize(("port_b", "nodes"), [(80, 2), (8080, 1)])
def test_host_port_conflicts(port_b: int, nodes: int) -> None:
    a = pod("a-0", 100, GI // 8, host_ports=(HostPort(80),))
    b = pod("b-0", 100, GI // 8, host_ports=(HostPort(port_b),))
    assert len(solve([a, b]).launches) == nodes


# --- volumes -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("pvcs", "pvs", "scs", "zones", "reason"), [
    ([PersistentVolumeClaim("default", "data", "gp3", "pv-1")], [PersistentVolume("pv-1", ("us-east-1b",))], [],
     ("us-east-1b",), None),
    ([PersistentVolumeClaim("default", "data", "wffc")], [], [StorageClass("wffc", "WaitForFirstConsumer",
                                                                           ("us-east-1c",))], ("us-east-1c",), None),
    ([], [], [], None, "PersistentVolumeClaim default/data not found"),
    ([PersistentVolumeClaim("default", "data", "imm")], [], [StorageClass("imm", "Immediate")], None,
     "is not bound yet"),
])
def test_volume_zone_topology(pvcs: list[PersistentVolumeClaim], pvs: list[PersistentVolume],
                              scs: list[StorageClass], zones: tuple[str, ...] | None, reason: str | None) -> None:
    result = solve([pod("db-0", volume_claims=("data",))], pvcs=pvcs, pvs=pvs, storage_classes=scs)
    if zones:
        assert result.launches[0].zones == zones
    else:
        assert reason is not None and reason in reasons(result)[0]


# --- daemon overhead -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("selector", "two_vcpu_allowed"), [({}, False), ({"kubernetes.io/arch": "arm64"}, True)])
def test_daemonset_overhead(selector: dict[str, str], two_vcpu_allowed: bool) -> None:
    ds = DaemonSet("kube-system", "agent", pod("agent", 1000, GI // 4, node_selector=selector,
                                                tolerations=(Toleration(operator="Exists"),)))
    result = solve([pod("a-0", 1000, GI // 2)], daemonsets=[ds])
    small = {"c5.large", "m5.large", "r5.large"}
    assert bool(small & set(result.launches[0].instance_types)) is two_vcpu_allowed


# --- existing capacity, weights, limits, availability --------------------------------------------------

def test_existing_and_in_flight_capacity_first() -> None:
    node = Node("n1", labels={ZONE: "us-east-1a", HOST: "n1"}, allocatable={"cpu": 1500, "memory": 4 * GI,
                                                                            "pods": 10}, ready=True)
    flight = InFlightNode("i-0abc", "default", "m5.large", "us-east-1b", "spot")
    result = solve(pods_of(4, cpu=900, memory=GI // 2), nodes=[node], in_flight=[flight])
    assert sorted(result.existing.values()) == ["i-0abc", "i-0abc", "n1"]
    assert len(result.launches) == 1
    cordoned = Node("n1", labels={ZONE: "us-east-1a"}, allocatable={"cpu": 8000, "memory": 8 * GI, "pods": 10},
                    unschedulable=True)
    assert solve(pods_of(1), nodes=[cordoned]).existing == {}


def test_weight_order_and_limits() -> None:
    heavy = pool("heavy", weight=50, requirements=SPOT_OD, limits={"cpu": "4"})
    light = pool("light", weight=10, requirements=SPOT_OD)
    result = solve(pods_of(6, cpu=1500, memory=GI), pools=[light, heavy])
    by_pool: dict[str, int] = {}
    for ln in result.launches:
        by_pool[ln.node_pool] = by_pool.get(ln.node_pool, 0) + len(ln.pods)
    assert by_pool["heavy"] >= 1 and by_pool.get("light", 0) >= 1
    assert sum(4 if "xlarge" in ln.instance_types[-1] else 2 for ln in result.launches
               if ln.node_pool == "heavy") <= 4
    only = solve(pods_of(6, cpu=1500, memory=GI), pools=[heavy])
    assert any("NodePool heavy limit reached" in r for r in reasons(only))


def test_unavailable_offerings_excluded_and_spot_falls_back() -> None:
    snap = world([pod("a-0", 500, GI // 2)])
    spot = {(o.instance_type, o.zone, o.capacity_type) for o in snap.offerings if o.capacity_type == "spot"}
    first = plan(snap).launches[0]
    assert first.capacity_type == "spot"
    blocked = {(first.instance_types[0], z, "spot") for z in ZONES}
    assert first.instance_types[0] not in plan(snap, unavailable=blocked).launches[0].instance_types
    fallback = plan(snap, unavailable=spot).launches[0]
    assert fallback.capacity_type == "on-demand"
    assert fallback.capacity_types == ("spot", "on-demand")


def test_spot_only_pool_without_spot_prices_is_unschedulable() -> None:
    spot_only = pool(requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])
    result = solve([pod("a-0")], pools=[spot_only], offers=offerings(spot=False))
    assert "no instance type has a priced offering its requirements allow (capacity types ['spot'])" in (
        reasons(result)[0])


# --- instance selection --------------------------------------------------------------------------------

def test_instance_types_cheapest_first_and_all_fit() -> None:
    result = solve([pod("a-0", 3000, 6 * GI)])
    ln = result.launches[0]
    assert ln.capacity_type == "spot"
    assert ln.instance_types[0] == "c5.xlarge"
    assert "c5.large" not in ln.instance_types
    assert ln.hourly_price == pytest.approx(0.17 * 0.35)


@pytest.mark.parametrize(("pods", "expect"), [
    # 63 pods fill an m5.4xlarge; the 17 left (4.25 CPU) go on a full m5.xlarge plus an m5.large, not on a
    # half-empty m5.2xlarge that would cost $0.096 an hour more.
    (80, [("m5.4xlarge", 63), ("m5.xlarge", 15), ("m5.large", 2)]),
    (63, [("m5.4xlarge", 63)]),
    (15, [("m5.xlarge", 15)]),
])
def test_last_fraction_of_a_group_goes_on_well_filled_nodes(pods: int, expect: list[tuple[str, int]]) -> None:
    reqs = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}]
    result = solve(pods_of(pods, cpu=250, memory=128 * 2**20), pools=[pool(requirements=reqs)])
    assert sorted((ln.instance_types[0], len(ln.pods)) for ln in result.launches) == sorted(expect)


def test_last_fraction_takes_one_node_rather_than_two_at_the_same_price() -> None:
    reqs = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5"]}]
    # two c5.large ($0.085 each, two pods each) cost exactly one c5.xlarge ($0.17, all four)
    result = solve(pods_of(4, cpu=900, memory=GI), pools=[pool(requirements=reqs)])
    assert [(ln.instance_types[0], len(ln.pods)) for ln in result.launches] == [("c5.xlarge", 4)]


@pytest.mark.parametrize(("min_values", "placed"), [(3, True), (4, False)])
def test_min_values(min_values: int, placed: bool) -> None:
    reqs = [*SPOT_OD, {"key": "karpenter.k8s.aws/instance-family", "operator": "NotIn", "values": ["p3"],
                       "minValues": min_values}]
    result = solve([pod("a-0", 3000, 6 * GI)], pools=[pool(requirements=reqs)])
    assert bool(result.launches) is placed
    if placed:
        families = {t.split(".")[0] for t in result.launches[0].instance_types}
        assert len(families) >= 3
    else:
        assert "minValues" in reasons(result)[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_order_of_catalog_does_not_matter(seed: int) -> None:
    pods = [*pods_of(5, cpu=700), pod("b-0", 2500, 3 * GI)]
    base = plan(world(pods))
    shuffled = plan(world(pods, seed=seed))
    assert [(ln.instance_types, ln.pods, ln.zones) for ln in base.launches] == [
        (ln.instance_types, ln.pods, ln.zones) for ln in shuffled.launches]


def test_no_nodepool_reason() -> None:
    snap = world([pod("a-0")])
    snap.node_pools = []
    result = plan(snap)
    assert reasons(result) == ["no NodePool is defined"]


def test_kubelet_max_pods_limits_pods_per_node() -> None:
    pools = [pool(requirements=SPOT_OD, kubelet={"maxPods": 3})]
    result = solve(pods_of(6, cpu=10, memory=GI // 64), pools=pools)
    assert all(len(ln.pods) <= 3 for ln in result.launches)
    assert len(result.launches) == 2


@pytest.mark.parametrize(("launched_for", "on_flight"), [
    (("default/web-0", "default/web-1"), ["default/web-0", "default/web-1"]),
    ((), ["default/web-2", "default/web-3"]),
])
def test_in_flight_instance_takes_back_the_pods_it_was_launched_for(launched_for: tuple[str, ...],
                                                                    on_flight: list[str]) -> None:
    # An existing node with room comes before in-flight capacity, except for the pods an instance
    # was launched for: those go back onto it, so a second pass never launches for them again.
    node = Node("n1", labels={ZONE: "us-east-1a", HOST: "n1"}, allocatable={"cpu": 2000, "memory": 4 * GI,
                                                                            "pods": 10}, ready=True)
    flight = InFlightNode("i-0abc", "default", "m5.large", "us-east-1b", "spot", pod_keys=launched_for)
    result = solve(pods_of(4, cpu=900, memory=GI // 2), nodes=[node], in_flight=[flight])
    assert sorted(k for k, v in result.existing.items() if v == "i-0abc") == on_flight
    assert not result.launches and len(result.existing) == 4


def test_in_flight_pod_keys_respect_anti_affinity() -> None:
    anti = (PodAffinityTerm(APP, HOST),)
    flight = InFlightNode("i-0abc", "default", "m5.large", "us-east-1b", "spot",
                          pod_keys=("default/web-0", "default/web-1"))
    result = solve(pods_of(2, pod_anti_affinity=anti, cpu=100, memory=GI // 8), in_flight=[flight])
    assert list(result.existing.items()) == [("default/web-0", "i-0abc")]
    assert [ln.pods for ln in result.launches] == [("default/web-1",)]
