"""Karpenter's topology tests (kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/
topology_test.go), ported as a table: each case names its Describe/Context/It path and asserts what
Karpenter asserts (skew per domain, pods scheduled or not, node counts)."""

from __future__ import annotations

import pytest

from autoscaler.domain.models import LabelSelector, Requirement, Taint
from tests.domain.karpenter_port import (
    ARCH,
    CT,
    HOST,
    IT,
    LABELS,
    SEL,
    Z1,
    Z2,
    Z3,
    ZONE,
    Case,
    Cluster,
    case_id,
    kpod,
    kpods,
    node,
    nodepool,
    registrar,
    req,
    spread,
    term,
    toleration,
)

CASES: list[Case] = []
T = "Topology"


karpenter = registrar(CASES, T)


ANY_ARCH = req(ARCH, "In", "amd64", "arm64")
BIG = 1100  # Karpenter's 1.1 CPU: one such pod fills most of a 2-vCPU node


# --- top level ------------------------------------------------------------------------------------


@karpenter("should ignore unknown topology keys")
def _(c: Cluster) -> None:
    # Given a pod spreading on a key no NodePool or node has, and a plain pod
    bad = kpod("bad", labels=LABELS, spreads=[spread("unknown")])
    ok = kpod("ok")
    # When provisioning
    c.provision([nodepool()], [bad, ok])
    # Then the spread pod is not scheduled (with a reason naming the key) and the plain one is
    assert not c.scheduled("bad") and "unknown" in c.unschedulable["bad"]
    assert c.scheduled("ok")


@karpenter("should not spread when a nil label selector is defined")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(2, labels=LABELS, spreads=[spread(ZONE, sel=None)]))
    assert c.skew(ZONE) == [2]


# --- Zonal ----------------------------------------------------------------------------------------


@karpenter("Zonal/should balance pods across zones (match labels)")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(4, labels=LABELS, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [1, 1, 2]


@karpenter("Zonal/should balance pods across zones (match expressions)")
def _(c: Cluster) -> None:
    sel = LabelSelector(match_expressions=(Requirement("test", "In", ("test",)),))
    c.provision([nodepool()], kpods(4, labels=LABELS, spreads=[spread(ZONE, sel=sel)]))
    assert c.skew(ZONE) == [1, 1, 2]


@karpenter("Zonal/should respect NodePool zonal constraints")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ZONE, "In", Z1, Z2, Z3))], kpods(4, labels=LABELS, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [1, 1, 2]


@karpenter("Zonal/should respect NodePool zonal constraints (subset) with requirements")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ZONE, "In", Z1, Z2))], kpods(4, labels=LABELS, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [2, 2]


@karpenter("Zonal/should respect NodePool zonal constraints (subset) with labels")
def _(c: Cluster) -> None:
    # item 12: a template label on the zone key limits the NodePool to that zone
    c.provision([nodepool(labels={ZONE: Z1})], kpods(4, labels=LABELS, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [4]
    assert {n.labels[ZONE] for n in c.nodes} == {Z1}


@karpenter("Zonal/should respect NodePool zonal constraints (subset) with requirements and labels")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", req(ZONE, "In", Z1, Z2), labels={ZONE: Z1})],
        kpods(4, labels=LABELS, spreads=[spread(ZONE)]),
    )
    assert c.skew(ZONE) == [4]


@karpenter("Zonal/should respect NodePool zonal constraints (subset) with labels across NodePools")
def _(c: Cluster) -> None:
    pools = [nodepool("default", req(ZONE, "In", Z1, Z2), labels={ZONE: Z1}), nodepool("second", labels={ZONE: Z2})]
    c.provision(pools, kpods(4, labels=LABELS, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [2, 2]


@karpenter("Zonal/should respect NodePool zonal constraints (existing pod)")
def _(c: Cluster) -> None:
    # item 1: a domain that only exists on a current node (zone c) bounds the skew; the pool cannot launch there
    c.provision([nodepool()], [kpod("first", labels=LABELS, cpu=BIG, node_selector={ZONE: Z3})])
    c.provision(
        [nodepool("default", req(ZONE, "In", Z1, Z2))], kpods(6, labels=LABELS, cpu=BIG, spreads=[spread(ZONE)])
    )
    assert c.skew(ZONE) == [1, 2, 2]


@karpenter("Zonal/should schedule to the non-minimum domain if its all that's available")
def _(c: Cluster) -> None:
    tsc = spread(ZONE, 5)
    c.provision([nodepool("default", req(ZONE, "In", Z1))], [kpod(labels=LABELS, cpu=BIG, spreads=[tsc])])
    c.provision([nodepool("default", req(ZONE, "In", Z2))], [kpod(labels=LABELS, cpu=BIG, spreads=[tsc])])
    assert c.skew(ZONE) == [1, 1]
    c.provision([nodepool("default", req(ZONE, "In", Z3))], kpods(10, labels=LABELS, cpu=BIG, spreads=[tsc]))
    assert c.skew(ZONE) == [1, 1, 6]


@karpenter("Zonal/should only schedule to minimum domains if already violating max skew")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(9, labels=LABELS, cpu=BIG, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [3, 3, 3]
    # Given only zone a's pods remain
    zone_of = {n.name: n.labels[ZONE] for n in c.nodes}
    c.pods = [p for p in c.pods if zone_of.get(p.node_name or "") == Z1]
    assert c.skew(ZONE) == [3]
    c.provision([nodepool()], kpods(3, labels=LABELS, cpu=BIG, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [1, 2, 3]


@karpenter("Zonal/should not violate max-skew when unsat = do not schedule")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ZONE, "In", Z1))], [kpod(labels=LABELS, cpu=BIG, spreads=[spread(ZONE)])])
    assert c.skew(ZONE) == [1]
    c.provision(
        [nodepool("default", req(ZONE, "In", Z2, Z3))], kpods(10, labels=LABELS, cpu=BIG, spreads=[spread(ZONE)])
    )
    assert c.skew(ZONE) == [1, 2, 2]


@karpenter("Zonal/should not violate max-skew when unsat = do not schedule (discover domains)")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ZONE, "In", Z1))], [kpod(labels=LABELS, cpu=BIG)])
    c.provision(
        [nodepool("default", req(ZONE, "In", Z2, Z3))], kpods(10, labels=LABELS, cpu=BIG, spreads=[spread(ZONE)])
    )
    assert c.skew(ZONE) == [1, 2, 2]


def _counting_world(c: Cluster, key: str, first: str, second: str) -> None:
    # Nodes without room: the bound pods count, the new ones go to new nodes.
    c.nodes += [node("first", {key: first}, cpu=0), node("second", {key: second}, cpu=0), node("third", {}, cpu=0)]
    c.pods += [
        kpod(node_name="first", phase="Running"),  # ignored, missing labels
        kpod(labels=LABELS, node_name="third", phase="Running"),  # ignored, no domain on node
        kpod(labels=LABELS, ns="other", node_name="first", phase="Running"),  # ignored, wrong namespace
        kpod(labels=LABELS, node_name="first", phase="Failed"),  # ignored, phase=Failed
        kpod(labels=LABELS, node_name="first", phase="Succeeded"),  # ignored, phase=Succeeded
        kpod(labels=LABELS, deleting=True),  # ignored, terminating
        kpod(labels=LABELS, node_name="first", phase="Running"),
        kpod(labels=LABELS, node_name="first", phase="Running"),
        kpod(labels=LABELS, node_name="second", phase="Running"),
    ]


@karpenter(
    "Zonal/should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain"
)
def _(c: Cluster) -> None:
    _counting_world(c, ZONE, Z1, Z2)
    c.provision([nodepool()], kpods(2, labels=LABELS, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [1, 2, 2]


@karpenter("Zonal/should match all pods when labelSelector is not specified")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod()])
    assert c.skew(ZONE, sel=None) == [1]


@karpenter("Zonal/should handle interdependent selectors")
def _(c: Cluster) -> None:
    # The pods do not match their own selector: adding them never changes the skew, so they share a node.
    pods = kpods(5, spreads=[spread(HOST)])
    c.provision([nodepool()], pods)
    assert len({c.node_of(p.name).name for p in pods}) == 1  # type: ignore[union-attr]


@karpenter("Zonal/should respect minDomains constraints")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", req(ZONE, "In", Z1, Z2))], kpods(3, labels=LABELS, spreads=[spread(ZONE, min_domains=3)])
    )
    assert c.skew(ZONE) == [1, 1]


@karpenter("Zonal/satisfied minDomains constraints (equal) should allow expected pod scheduling")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", req(ZONE, "In", Z1, Z2, Z3))],
        kpods(11, labels=LABELS, spreads=[spread(ZONE, min_domains=3)]),
    )
    assert c.skew(ZONE) == [3, 4, 4]


@karpenter("Zonal/satisfied minDomains constraints (greater than minimum) should allow expected pod scheduling")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", req(ZONE, "In", Z1, Z2, Z3))],
        kpods(11, labels=LABELS, spreads=[spread(ZONE, min_domains=2)]),
    )
    assert c.skew(ZONE) == [3, 4, 4]


# --- Hostname -------------------------------------------------------------------------------------


@karpenter("Hostname/should balance pods across nodes")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(4, labels=LABELS, spreads=[spread(HOST)]))
    assert c.skew(HOST) == [1, 1, 1, 1]


@karpenter("Hostname/should balance pods on the same hostname up to maxskew")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(4, labels=LABELS, spreads=[spread(HOST, 4)]))
    assert c.skew(HOST) == [4]


def _app(app: str, **kw: object) -> dict[str, object]:
    return {"labels": {"app": app}, "spreads": [spread(HOST, sel=LabelSelector(match_labels=(("app", app),)))], **kw}


@karpenter("Hostname/balance multiple deployments with hostname topology spread")
def _(c: Cluster) -> None:
    pods = kpods(2, **_app("app1")) + kpods(2, **_app("app2"))  # type: ignore[arg-type]
    c.provision([nodepool()], pods)
    assert all(c.scheduled(p.name) for p in pods)
    assert len(c.nodes) == 2


@karpenter("Hostname/balance multiple deployments with hostname topology spread & varying arch")
def _(c: Cluster) -> None:
    pods = (
        kpods(2, **_app("app1", reqs=[(ARCH, "In", ["amd64"])]))  # type: ignore[arg-type]
        + kpods(2, **_app("app2", reqs=[(ARCH, "In", ["arm64"])]))
    )  # type: ignore[arg-type]
    c.provision([nodepool("default", ANY_ARCH)], pods)
    assert all(c.scheduled(p.name) for p in pods)
    assert len(c.nodes) == 4


# --- CapacityType ---------------------------------------------------------------------------------


@karpenter("CapacityType/should balance pods across capacity types")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(4, labels=LABELS, spreads=[spread(CT)]))
    assert c.skew(CT) == [2, 2]


@karpenter("CapacityType/should respect NodePool capacity type constraints")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", req(CT, "In", "spot", "on-demand"))], kpods(4, labels=LABELS, spreads=[spread(CT)])
    )
    assert c.skew(CT) == [2, 2]


@karpenter("CapacityType/should not violate max-skew when unsat = do not schedule (capacity type)")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(CT, "In", "spot"))], [kpod(labels=LABELS, cpu=BIG, spreads=[spread(CT)])])
    assert c.skew(CT) == [1]
    c.provision(
        [nodepool("default", req(CT, "In", "on-demand"))], kpods(5, labels=LABELS, cpu=BIG, spreads=[spread(CT)])
    )
    assert c.skew(CT) == [1, 2]


@karpenter("CapacityType/should violate max-skew when unsat = schedule anyway (capacity type)")
def _(c: Cluster) -> None:
    tsc = spread(CT, when="ScheduleAnyway")
    c.provision([nodepool("default", req(CT, "In", "spot"))], [kpod(labels=LABELS, cpu=BIG, spreads=[tsc])])
    c.provision([nodepool("default", req(CT, "In", "on-demand"))], kpods(5, labels=LABELS, cpu=BIG, spreads=[tsc]))
    assert c.skew(CT) == [1, 5]


@karpenter(
    "CapacityType/should only count running/scheduled pods with matching labels scheduled to nodes with a "
    "corresponding domain"
)
def _(c: Cluster) -> None:
    _counting_world(c, CT, "spot", "on-demand")
    c.provision([nodepool()], kpods(2, labels=LABELS, spreads=[spread(CT)]))
    assert c.skew(CT) == [2, 3]


@karpenter("CapacityType/should match all pods when labelSelector is not specified")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod()])
    assert c.skew(CT, sel=None) == [1]


@karpenter("CapacityType/should handle interdependent selectors")
def _(c: Cluster) -> None:
    pods = kpods(5, spreads=[spread(HOST)])
    c.provision([nodepool()], pods)
    assert len({c.node_of(p.name).name for p in pods}) == 1  # type: ignore[union-attr]


@karpenter("CapacityType/should balance pods across capacity-types (node required affinity constrained)")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod(labels=LABELS, reqs=[(ZONE, "In", [Z1]), (CT, "In", ["on-demand"])])])
    # The existing on-demand node is in zone a, which these pods' affinity excludes: it is no domain for them.
    c.provision(
        [nodepool()], kpods(5, labels=LABELS, spreads=[spread(CT)], reqs=[(ZONE, "In", [Z2]), (CT, "In", ["spot"])])
    )
    assert c.skew(CT) == [1, 5]


@karpenter("CapacityType/should balance pods across capacity-types (no constraints)")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool()], [kpod(labels=LABELS, cpu=2000, node_selector={IT: "c5.xlarge"}, reqs=[(CT, "In", ["on-demand"])])]
    )
    c.provision([nodepool("default", req(CT, "In", "spot"))], kpods(5, labels=LABELS, cpu=2000, spreads=[spread(CT)]))
    assert c.skew(CT) == [1, 2]


@karpenter("CapacityType/should balance pods across arch (no constraints)")
def _(c: Cluster) -> None:
    # item 3: kubernetes.io/arch is a topology key like any other
    # (the first pod fills its node, as Karpenter's single-pod instance type does)
    c.provision(
        [nodepool("default", ANY_ARCH)],
        [kpod(labels=LABELS, cpu=3500, node_selector={IT: "c5.xlarge"}, reqs=[(ARCH, "In", ["amd64"])])],
    )
    c.provision(
        [nodepool("default", req(ARCH, "In", "arm64"))], kpods(5, labels=LABELS, cpu=1500, spreads=[spread(ARCH)])
    )
    assert c.skew(ARCH) == [1, 2]


# --- Combined -------------------------------------------------------------------------------------


@karpenter(
    "Combined Hostname and Zonal Topology/should spread pods while respecting both constraints (hostname and zonal)"
)
def _(c: Cluster) -> None:
    tscs = [spread(ZONE), spread(HOST, 3)]
    for n, want in ((2, [1, 1]), (3, [1, 2, 2]), (5, [3, 3, 4]), (11, [7, 7, 7])):
        c.provision([nodepool()], kpods(n, labels=LABELS, spreads=tscs))
        assert c.skew(ZONE) == want
        assert max(c.skew(HOST)) <= 3


@karpenter("Combined Hostname and Zonal Topology/should balance pods across NodePool requirements")
def _(c: Cluster) -> None:
    # item 3: a custom NodePool label is a topology key; its values come from the NodePools' requirements
    key = "capacity.spread.4-1"
    pools = [
        nodepool("spot", req(CT, "In", "spot"), req(key, "In", "2", "3", "4", "5")),
        nodepool("on-demand", req(CT, "In", "on-demand"), req(key, "In", "1")),
    ]
    pods = kpods(20, labels=LABELS, spreads=[spread(key)])
    c.provision(pools, pods)
    assert all(c.scheduled(p.name) for p in pods)
    assert c.skew(key) == [4, 4, 4, 4, 4]
    assert c.skew(CT) == [4, 16]


@karpenter(
    "Combined Hostname and Zonal Topology/should spread pods while respecting both constraints "
    "(zone DoNotSchedule, hostname ScheduleAnyway, a NodePool at its limit)"
)
def _(c: Cluster) -> None:
    pools = [nodepool("default", req(ZONE, "In", Z1, Z2)), nodepool("zone-c", req(ZONE, "In", Z3), limits={"cpu": "0"})]
    c.provision(pools, kpods(10, labels=LABELS, spreads=[spread(ZONE), spread(HOST, when="ScheduleAnyway")]))
    # zone c is a domain (its NodePool can never launch): one pod per zone, one per node
    assert c.skew(ZONE) == [1, 1]
    assert c.skew(HOST) == [1, 1]


@karpenter(
    "Combined Hostname and Zonal Topology/should spread pods while respecting both constraints "
    "(capacity type and hostname)"
)
def _(c: Cluster) -> None:
    tscs = [spread(CT), spread(HOST, 3)]
    for n, want in ((2, [1, 1]), (3, [2, 3]), (5, [5, 5]), (11, [10, 11])):
        c.provision([nodepool()], kpods(n, labels=LABELS, spreads=tscs))
        assert c.skew(CT) == want
        assert max(c.skew(HOST)) <= 3


# --- MatchLabelKeys -------------------------------------------------------------------------------


@karpenter("MatchLabelKeys/should ignore unknown labels specified in matchLabelKeys")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(4, labels=LABELS, spreads=[spread(HOST)]))
    assert c.skew(HOST) == [1, 1, 1, 1]


# --- NodeTaintsPolicy / NodeAffinityPolicy --------------------------------------------------------

FAKE = "fake-label"
TAINT = Taint("taintname", "NoSchedule", "taintvalue")


@karpenter("NodeTaintsPolicy/should balance pods across a label (NodeTaintsPolicy=ignore)")
def _(c: Cluster) -> None:
    c.nodes += [
        node("n-foo", {FAKE: "foo"}, cpu=100, taints=[TAINT]),
        node("n-bar", {FAKE: "bar"}, cpu=100, taints=[TAINT]),
    ]
    c.provision(
        [nodepool(labels={FAKE: "baz"})],
        kpods(5, labels=LABELS, cpu=1000, spreads=[spread(FAKE, node_taints_policy="Ignore")]),
    )
    assert c.skew(FAKE) == [1]


@karpenter("NodeTaintsPolicy/should balance pods across a label (NodeTaintsPolicy=honor)")
def _(c: Cluster) -> None:
    c.nodes += [
        node("n-foo", {FAKE: "foo"}, cpu=100, taints=[TAINT]),
        node("n-bar", {FAKE: "bar"}, cpu=100, taints=[TAINT]),
    ]
    c.provision(
        [nodepool(labels={FAKE: "baz"})],
        kpods(5, labels=LABELS, cpu=1000, spreads=[spread(FAKE, node_taints_policy="Honor")]),
    )
    assert c.skew(FAKE) == [5]


def _tainted_pools() -> list:  # type: ignore[type-arg]
    return [
        nodepool("default", req(FAKE, "In", "foo")),
        nodepool(
            "tainted",
            req(FAKE, "In", "bar"),
            taints=[{"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}],
        ),
    ]


@karpenter(
    "NodeTaintsPolicy/should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=ignore)"
)
def _(c: Cluster) -> None:
    c.provision(_tainted_pools(), kpods(2, labels=LABELS, spreads=[spread(FAKE, node_taints_policy="Ignore")]))
    assert c.skew(FAKE) == [1]


@karpenter(
    "NodeTaintsPolicy/should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=honor)"
)
def _(c: Cluster) -> None:
    c.provision(_tainted_pools(), kpods(2, labels=LABELS, spreads=[spread(FAKE, node_taints_policy="Honor")]))
    assert c.skew(FAKE) == [2]


@karpenter(
    "NodeTaintsPolicy/should balance pods across a label when mutually exclusive NodePools (by taints) share "
    "domains (NodeTaintsPolicy=honor)"
)
def _(c: Cluster) -> None:
    pools = [
        nodepool(
            f"np-{i}",
            req(FAKE, "In", *doms),
            taints=[{"key": "taint-key", "value": f"nodepool-{i}", "effect": "NoSchedule"}],
        )
        for i, doms in enumerate((("foo", "bar"), ("foo", "baz")))
    ]
    tsc = spread(FAKE, node_taints_policy="Honor")
    pods = [
        kpod(labels=LABELS, spreads=[tsc], tolerations=[toleration("taint-key", f"nodepool-{i}", "NoSchedule")])
        for i, n in enumerate((2, 4))
        for _ in range(n)
    ]
    c.provision(pools, pods)
    assert c.skew(FAKE) == [1, 2, 3]


def _affinity_policy_world(c: Cluster) -> None:
    c.nodes += [
        node("n-foo", {FAKE: "foo", "selector": "mismatch"}, cpu=100),
        node("n-bar", {FAKE: "bar", "selector": "mismatch"}, cpu=100),
    ]


@karpenter("NodeAffinityPolicy/should balance pods across a label (NodeAffinityPolicy=ignore)")
def _(c: Cluster) -> None:
    _affinity_policy_world(c)
    c.provision(
        [nodepool(labels={FAKE: "baz", "selector": "value"})],
        kpods(
            5,
            labels=LABELS,
            cpu=1000,
            node_selector={"selector": "value"},
            spreads=[spread(FAKE, node_affinity_policy="Ignore")],
        ),
    )
    assert c.skew(FAKE) == [1]


@karpenter("NodeAffinityPolicy/should balance pods across a label (NodeAffinityPolicy=honor)")
def _(c: Cluster) -> None:
    _affinity_policy_world(c)
    c.provision(
        [nodepool(labels={FAKE: "baz", "selector": "value"})],
        kpods(
            5,
            labels=LABELS,
            cpu=1000,
            node_selector={"selector": "value"},
            spreads=[spread(FAKE, node_affinity_policy="Honor")],
        ),
    )
    assert c.skew(FAKE) == [5]


@karpenter("Combined Zonal and Capacity Type Topology/should spread pods while respecting both constraints")
def _(c: Cluster) -> None:
    tscs = [spread(CT), spread(ZONE)]
    for n, ct_max, zone_max in ((2, 1, 1), (3, 3, 2), (3, 5, 4), (11, 11, 7)):
        c.provision([nodepool()], kpods(n, labels=LABELS, spreads=tscs))
        assert max(c.skew(CT)) <= ct_max and max(c.skew(ZONE)) <= zone_max


@karpenter("Combined Hostname, Zonal, and Capacity Type Topology/should spread pods while respecting all constraints")
def _(c: Cluster) -> None:
    tscs = [spread(CT), spread(ZONE, 2), spread(HOST, 3)]
    for i in range(1, 15):
        pods = kpods(i, labels=LABELS, spreads=tscs)
        c.provision([nodepool()], pods)
        for key, most in ((CT, 1), (ZONE, 2), (HOST, 3)):
            counts = c.skew(key)
            domains = 2 if key == CT else 3 if key == ZONE else len(counts)
            low = min(counts) if len(counts) == domains else 0
            assert max(counts) - low <= most, (i, key, counts)
        assert all(c.scheduled(p.name) for p in pods)


@karpenter("Combined Zonal Topology and Node Affinity/should limit spread options by nodeSelector")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool()],
        kpods(5, labels=LABELS, spreads=[spread(ZONE)], node_selector={ZONE: Z1})
        + kpods(10, labels=LABELS, spreads=[spread(ZONE)], node_selector={ZONE: Z2}),
    )
    assert c.skew(ZONE) == [5, 10]


@karpenter("Combined Zonal Topology and Node Affinity/should limit spread options by node requirements")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(10, labels=LABELS, spreads=[spread(ZONE)], reqs=[(ZONE, "In", [Z1, Z2])]))
    assert c.skew(ZONE) == [5, 5]


@karpenter("Combined Zonal Topology and Node Affinity/should limit spread options by required node affinity")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(6, labels=LABELS, spreads=[spread(ZONE)], reqs=[(ZONE, "In", [Z1, Z2])]))
    assert c.skew(ZONE) == [3, 3]
    all3 = nodepool("default", req(ZONE, "In", Z1, Z2, Z3))
    c.provision([all3], [kpod(labels=LABELS, spreads=[spread(ZONE)], reqs=[(ZONE, "In", [Z2, Z3])])])
    assert c.skew(ZONE) == [1, 3, 3]
    c.provision([all3], kpods(5, labels=LABELS, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [4, 4, 4]


@karpenter("Combined Zonal Topology and Node Affinity/should not limit spread options by preferred node affinity")
def _(c: Cluster) -> None:
    # item 4: a preference does not narrow the spread's domains
    c.provision([nodepool()], kpods(6, labels=LABELS, spreads=[spread(ZONE)], prefs=[(1, [(ZONE, "In", [Z1, Z2])])]))
    assert c.skew(ZONE) == [2, 2, 2]


@karpenter("Combined Capacity Type Topology and Node Affinity/should limit spread options by nodeSelector")
def _(c: Cluster) -> None:
    tsc = spread(CT, when="ScheduleAnyway")
    c.provision(
        [nodepool()],
        kpods(5, labels=LABELS, spreads=[tsc], node_selector={CT: "spot"})
        + kpods(5, labels=LABELS, spreads=[tsc], node_selector={CT: "on-demand"}),
    )
    assert c.skew(CT) == [5, 5]


@karpenter(
    "Combined Capacity Type Topology and Node Affinity/should limit spread options by node affinity (capacity type)"
)
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(3, labels=LABELS, spreads=[spread(CT)], reqs=[(CT, "In", ["spot"])]))
    assert c.skew(CT) == [3]
    c.provision([nodepool()], [kpod(labels=LABELS, spreads=[spread(CT)], reqs=[(CT, "In", ["on-demand", "spot"])])])
    assert c.skew(CT) == [1, 3]
    c.provision([nodepool()], kpods(5, labels=LABELS, spreads=[spread(CT)]))
    assert c.skew(CT) == [4, 5]


# --- Pod Affinity/Anti-Affinity -------------------------------------------------------------------

AFF = {"security": "s2"}
AFF_SEL = LabelSelector(match_labels=(("security", "s2"),))
PA = "Pod Affinity/Anti-Affinity"


def _same(c: Cluster, a: str, b: str) -> bool:
    na, nb = c.node_of(a), c.node_of(b)
    assert na is not None and nb is not None, c.unschedulable
    return na.name == nb.name


@karpenter(f"{PA}/should schedule a pod with empty pod affinity and anti-affinity")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", aff=[], anti=[])])
    assert c.scheduled("p")


@karpenter(f"{PA}/should respect pod affinity (hostname)")
def _(c: Cluster) -> None:
    pods = [
        *kpods(10, labels=LABELS, spreads=[spread(HOST)]),
        kpod("aff1", labels=AFF),
        kpod("aff2", aff=[term(HOST, AFF_SEL)]),
    ]
    c.provision([nodepool()], pods)
    assert _same(c, "aff1", "aff2")


@karpenter(f"{PA}/should respect pod affinity (arch)")
def _(c: Cluster) -> None:
    # item 3: affinity on kubernetes.io/arch
    tsc = spread(HOST, sel=AFF_SEL)
    c.provision(
        [nodepool("default", ANY_ARCH)],
        [
            kpod("aff1", labels=AFF, cpu=1500, spreads=[tsc], node_selector={ARCH: "arm64"}),
            kpod("aff2", labels=AFF, cpu=1000, spreads=[tsc], aff=[term(ARCH, AFF_SEL)]),
        ],
    )
    n1, n2 = c.node_of("aff1"), c.node_of("aff2")
    assert n1 is not None and n2 is not None, c.unschedulable
    assert n1.labels[ARCH] == n2.labels[ARCH] and n1.name != n2.name


@karpenter(f"{PA}/should respect self pod affinity (hostname)")
def _(c: Cluster) -> None:
    pods = kpods(3, labels=AFF, aff=[term(HOST, AFF_SEL)])
    c.provision([nodepool()], pods)
    assert len({c.node_of(p.name).name for p in pods}) == 1  # type: ignore[union-attr]


@karpenter(f"{PA}/should respect self pod affinity for first empty topology domain only (hostname)")
def _(c: Cluster) -> None:
    # Given 10 pods with self hostname affinity of which the largest type (m5.4xlarge) holds 5
    pool = nodepool("default", req("karpenter.k8s.aws/instance-family", "In", "m5"))
    pods = kpods(10, labels=AFF, cpu=3000, aff=[term(HOST, AFF_SEL)])
    c.provision([pool], pods)
    placed = [p for p in pods if c.scheduled(p.name)]
    # Then one node takes 5 and the other 5 wait; a second batch does not schedule either
    assert len(placed) == 5 and len({c.node_of(p.name).name for p in placed}) == 1  # type: ignore[union-attr]
    more = kpods(10, labels=AFF, cpu=3000, aff=[term(HOST, AFF_SEL)])
    c.provision([pool], more)
    assert not any(c.scheduled(p.name) for p in more)


@karpenter(f"{PA}/should respect self pod affinity (zone)")
def _(c: Cluster) -> None:
    pods = kpods(3, labels=AFF, aff=[term(ZONE, AFF_SEL)])
    c.provision([nodepool()], pods)
    assert len({c.node_of(p.name).name for p in pods}) == 1  # type: ignore[union-attr]


@karpenter(f"{PA}/should respect self pod affinity (zone w/ constraint)")
def _(c: Cluster) -> None:
    pods = kpods(3, labels=AFF, aff=[term(ZONE, AFF_SEL)], reqs=[(ZONE, "In", [Z3])])
    c.provision([nodepool()], pods)
    nodes = {c.node_of(p.name).name for p in pods}  # type: ignore[union-attr]
    assert len(nodes) == 1 and c.node_of(pods[0].name).labels[ZONE] == Z3  # type: ignore[union-attr]


@karpenter(f"{PA}/should respect self pod affinity for first empty topology domain only (hostname/constrained zones)")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod(labels=AFF, node_selector={ZONE: Z1}, aff=[term(HOST, AFF_SEL)])])
    pods = kpods(10, labels=AFF, reqs=[(ZONE, "In", [Z2, Z3])], aff=[term(HOST, AFF_SEL)])
    c.provision([nodepool()], pods)
    assert not any(c.scheduled(p.name) for p in pods)


@karpenter(
    f"{PA}/should allow two nodes to be created when two pods with matching affinities have incompatible selectors"
)
def _(c: Cluster) -> None:
    sel = LabelSelector(match_labels=(("security", "s1"),))
    p1 = kpod("p1", labels={"security": "s1"}, aff=[term(ZONE, sel)], reqs=[(ZONE, "In", [Z2])])
    p2 = kpod("p2", labels={"security": "s1"}, aff=[term(ZONE, sel)], reqs=[(ZONE, "In", [Z3])])
    c.provision([nodepool()], [p1, p2])
    n1, n2 = c.node_of("p1"), c.node_of("p2")
    assert n1 is not None and n2 is not None
    assert (n1.labels[ZONE], n2.labels[ZONE]) == (Z2, Z3)


@karpenter(f"{PA}/should allow violation of preferred pod affinity")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool()],
        [*kpods(10, labels=LABELS, spreads=[spread(HOST)]), kpod("aff", pref_aff=[(50, term(HOST, AFF_SEL))])],
    )
    assert c.scheduled("aff")


@karpenter(f"{PA}/should allow violation of preferred pod anti-affinity")
def _(c: Cluster) -> None:
    aff = kpods(10, pref_anti=[(50, term(ZONE, SEL))])
    c.provision([nodepool()], kpods(3, labels=LABELS, spreads=[spread(ZONE)]) + aff)
    assert all(c.scheduled(p.name) for p in aff)


@karpenter(f"{PA}/should separate nodes using simple pod anti-affinity on hostname")
def _(c: Cluster) -> None:
    for i in range(10):
        c.provision([nodepool()], [kpod(f"anti-{i}", anti=[term(HOST, AFF_SEL)]), kpod(f"target-{i}", labels=AFF)])
        assert not _same(c, f"anti-{i}", f"target-{i}")


def _zone_pods(**kw: object) -> list:  # type: ignore[type-arg]
    return [kpod(f"zone{i}", cpu=2000, node_selector={ZONE: z}, **kw) for i, z in enumerate((Z1, Z2, Z3), 1)]  # type: ignore[arg-type]


@karpenter(f"{PA}/should not violate pod anti-affinity on zone")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [*_zone_pods(labels=AFF), kpod("aff", anti=[term(ZONE, AFF_SEL)])])
    assert all(c.scheduled(f"zone{i}") for i in (1, 2, 3))
    assert not c.scheduled("aff")


@karpenter(
    f"{PA}/should not violate pod anti-affinity on zone (other schedules first)",
    difference="zone anti-affinity against a pod pending in the same batch",
)
def _(c: Cluster) -> None:
    # item 2: Karpenter leaves the anti-affinity pod pending until the other pod's zone is known; we pin the
    # two to different zones in the same plan
    c.provision([nodepool()], [kpod("target", labels=AFF, cpu=2000), kpod("aff", anti=[term(ZONE, AFF_SEL)])])
    nt, na = c.node_of("target"), c.node_of("aff")
    assert nt is not None and na is not None
    assert nt.labels[ZONE] != na.labels[ZONE]


@karpenter(f"{PA}/should not violate pod anti-affinity (arch)")
def _(c: Cluster) -> None:
    # item 3: anti-affinity on kubernetes.io/arch
    tsc = spread(HOST, sel=AFF_SEL)
    c.provision(
        [nodepool("default", ANY_ARCH)],
        [
            kpod("aff1", labels=AFF, cpu=1500, spreads=[tsc], node_selector={ARCH: "arm64"}),
            kpod("aff2", labels=AFF, cpu=1000, spreads=[tsc], anti=[term(ARCH, AFF_SEL)]),
        ],
    )
    n1, n2 = c.node_of("aff1"), c.node_of("aff2")
    assert n1 is not None and n2 is not None, c.unschedulable
    assert n1.labels[ARCH] != n2.labels[ARCH]


@karpenter(f"{PA}/should violate preferred pod anti-affinity on zone (inverse)")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [*_zone_pods(pref_anti=[(10, term(ZONE, AFF_SEL))]), kpod("aff", labels=AFF)])
    assert all(c.scheduled(f"zone{i}") for i in (1, 2, 3)) and c.scheduled("aff")


@karpenter(f"{PA}/should not violate pod anti-affinity on zone (inverse)")
def _(c: Cluster) -> None:
    # item 2: the anti-affinity of pods pending in the same batch applies to the pod they exclude (symmetry)
    c.provision([nodepool()], [*_zone_pods(anti=[term(ZONE, AFF_SEL)]), kpod("aff", labels=AFF)])
    assert all(c.scheduled(f"zone{i}") for i in (1, 2, 3))
    assert not c.scheduled("aff")


@karpenter(
    f"{PA}/should not violate pod anti-affinity on zone (Schrödinger)",
    difference="zone anti-affinity against a pod pending in the same batch",
)
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("anywhere", cpu=2000, anti=[term(ZONE, AFF_SEL)]), kpod("aff", labels=AFF)])
    n1, n2 = c.node_of("anywhere"), c.node_of("aff")
    assert n1 is not None and n2 is not None
    assert n1.labels[ZONE] != n2.labels[ZONE]


@karpenter(f"{PA}/should not violate pod anti-affinity on zone (inverse w/existing nodes)")
def _(c: Cluster) -> None:
    # item 2: existing pods' required zone anti-affinity applies to new pods
    c.provision([nodepool()], _zone_pods(anti=[term(ZONE, AFF_SEL)]))
    c.provision([nodepool()], [kpod("aff", labels=AFF)])
    assert not c.scheduled("aff")


@karpenter(f"{PA}/should violate preferred pod anti-affinity on zone (inverse w/existing nodes)")
def _(c: Cluster) -> None:
    c.provision([nodepool()], _zone_pods(pref_anti=[(10, term(ZONE, AFF_SEL))]))
    c.provision([nodepool()], [kpod("aff", labels=AFF)])
    assert c.scheduled("aff")


@karpenter(f"{PA}/should allow violation of a pod affinity preference with a conflicting required constraint")
def _(c: Cluster) -> None:
    pods = [
        *kpods(3, labels=LABELS, spreads=[spread(HOST)], pref_aff=[(50, term(HOST, AFF_SEL))]),
        kpod("target", labels=AFF),
    ]
    c.provision([nodepool()], pods)
    assert all(c.scheduled(p.name) for p in pods)
    assert c.skew(HOST) == [1, 1, 1]


@karpenter(
    f"{PA}/should support pod anti-affinity with a zone topology",
    difference="zone anti-affinity against a pod pending in the same batch",
)
def _(c: Cluster) -> None:
    # Karpenter needs one batch per zone; we place one pod per zone in the first batch
    def batch() -> list:  # type: ignore[type-arg]
        return kpods(3, labels=AFF, anti=[term(ZONE, AFF_SEL)])

    c.provision([nodepool()], batch())
    assert c.skew(ZONE, sel=None) == [1, 1, 1]
    c.pods = [p for p in c.pods if p.node_name]
    c.provision([nodepool()], batch())
    assert c.skew(ZONE, sel=None) == [1, 1, 1]


@karpenter(f"{PA}/should not schedule pods with affinity to a non-existent pod")
def _(c: Cluster) -> None:
    pods = kpods(10, aff=[term(ZONE, AFF_SEL)])
    c.provision([nodepool()], pods)
    assert not any(c.scheduled(p.name) for p in pods)


@karpenter(
    f"{PA}/should support pod affinity with zone topology (unconstrained target)",
    difference="pod affinity to a pod pending in the same batch",
)
def _(c: Cluster) -> None:
    # item 2: Karpenter schedules only the target in the first batch; we place the followers with it
    pods = [*kpods(10, aff=[term(ZONE, AFF_SEL)]), kpod("target", labels=AFF)]
    c.provision([nodepool()], pods)
    assert all(c.scheduled(p.name) for p in pods)
    assert c.skew(ZONE, sel=None) == [11]


@karpenter(f"{PA}/should support pod affinity with zone topology (constrained target)")
def _(c: Cluster) -> None:
    pods = [*kpods(10, aff=[term(ZONE, AFF_SEL)]), kpod("target", labels=AFF, reqs=[(ZONE, "In", [Z1])])]
    c.provision([nodepool()], pods)
    assert c.skew(ZONE, sel=None) == [11]


@karpenter(f"{PA}/should handle multiple dependent affinities")
def _(c: Cluster) -> None:
    def lab(t: str) -> dict[str, str]:
        return {"type": t, "spread": "spread"}

    def sel(t: str) -> LabelSelector:
        return LabelSelector(match_labels=tuple(sorted(lab(t).items())))

    for _ in range(5):
        pods = [
            kpod(labels=lab("db")),
            kpod(labels=lab("web"), aff=[term(HOST, sel("db"))]),
            kpod(labels=lab("cache"), aff=[term(HOST, sel("web"))]),
            kpod(labels=lab("ui"), aff=[term(HOST, sel("cache"))]),
        ]
        fresh = Cluster()
        fresh.provision([nodepool()], pods)
        assert all(fresh.scheduled(p.name) for p in pods), fresh.unschedulable


@karpenter(f"{PA}/should fail to schedule pods with unsatisfiable dependencies")
def _(c: Cluster) -> None:
    web = LabelSelector(match_labels=(("type", "web"),))
    c.provision([nodepool()], [kpod("db", labels={"type": "db"}, aff=[term(HOST, web)])])
    assert not c.scheduled("db")


@karpenter(f"{PA}/should filter pod affinity topologies by namespace, no matching pods")
def _(c: Cluster) -> None:
    pods = [
        *kpods(10, labels=LABELS, spreads=[spread(HOST)]),
        kpod("aff1", labels=AFF, ns="other-ns-no-match"),
        kpod("aff2", aff=[term(HOST, AFF_SEL)]),
    ]
    c.provision([nodepool()], pods)
    assert c.scheduled("aff1") and not c.scheduled("aff2")


@karpenter(f"{PA}/should filter pod affinity topologies by namespace, matching pods namespace list")
def _(c: Cluster) -> None:
    pods = [
        *kpods(10, labels=LABELS, spreads=[spread(HOST)]),
        kpod("aff1", labels=AFF, ns="other-ns-list"),
        kpod("aff2", aff=[term(HOST, AFF_SEL, ("other-ns-list",))]),
    ]
    c.provision([nodepool()], pods)
    assert _same(c, "aff1", "aff2")


@karpenter("should taint nodes with NodePool taints")
def _(c: Cluster) -> None:
    taint = {"key": "test", "value": "bar", "effect": "NoSchedule"}
    c.provision([nodepool(taints=[taint])], [kpod("p", tolerations=[toleration("test", op="Exists")])])
    n = c.node_of("p")
    assert n is not None and any(t.key == "test" for t in n.taints)


@karpenter("should schedule pods that tolerate NodePool constraints")
def _(c: Cluster) -> None:
    pool = nodepool(taints=[{"key": "test-key", "value": "test-value", "effect": "NoSchedule"}])
    pods = [
        kpod("equal", tolerations=[toleration("test-key", "test-value", "NoSchedule")]),
        kpod("exists", tolerations=[toleration("test-key", effect="NoSchedule", op="Exists")]),
        kpod("wrong-value", tolerations=[toleration("test-key", "invalid", "NoSchedule")]),
        kpod("none"),
    ]
    c.provision([pool], pods)
    assert c.scheduled("equal") and c.scheduled("exists")
    assert not c.scheduled("wrong-value") and not c.scheduled("none")


@karpenter("should provision nodes with taints and schedule pods if the taint is only a startup taint")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool(startup_taints=[{"key": "ignore-me", "value": "nothing", "effect": "NoSchedule"}])], [kpod("p")]
    )
    assert c.scheduled("p")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_karpenter_topology(case: Case) -> None:
    case.run(Cluster())
