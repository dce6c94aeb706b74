"""Karpenter's scheduling suite (kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/
suite_test.go and instance_selection_test.go) ported as a table, plus one test per defect of issue 15
(``test_issue15_item_N_...``), each asserting what kube-scheduler would do."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.models import DaemonSet, LabelSelector, Pod, Taint
from tests.domain.karpenter_port import (
    ARCH,
    CT,
    HOST,
    IT,
    LABELS,
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
from tests.domain.scheduling_world import GI

CASES: list[Case] = []
S = "Scheduling"


karpenter = registrar(CASES, S)


ANY_ARCH = req(ARCH, "In", "amd64", "arm64")


def labels_of(c: Cluster, name: str) -> dict[str, str]:
    n = c.node_of(name)
    assert n is not None, c.unschedulable
    return dict(n.labels)


# --- Custom Constraints / NodePool with Labels ----------------------------------------------------

CC = "Custom Constraints"


@karpenter(f"{CC}/NodePool with Labels/should schedule unconstrained pods that don't have matching node selectors")
def _(c: Cluster) -> None:
    c.provision([nodepool(labels={"test-key": "test-value"})], [kpod("p")])
    assert labels_of(c, "p")["test-key"] == "test-value"


@karpenter(f"{CC}/NodePool with Labels/should not schedule pods that have conflicting node selectors")
def _(c: Cluster) -> None:
    c.provision([nodepool(labels={"test-key": "test-value"})], [kpod("p", node_selector={"test-key": "different"})])
    assert not c.scheduled("p")


@karpenter(f"{CC}/NodePool with Labels/should not schedule pods that have node selectors with undefined key")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", node_selector={"test-key": "test-value"})])
    assert not c.scheduled("p")


@karpenter(f"{CC}/NodePool with Labels/should schedule pods that have matching requirements")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool(labels={"test-key": "test-value"})],
        [kpod("p", reqs=[("test-key", "In", ["test-value", "another-value"])])],
    )
    assert labels_of(c, "p")["test-key"] == "test-value"


@karpenter(f"{CC}/NodePool with Labels/should not schedule pods that have conflicting requirements")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool(labels={"test-key": "test-value"})], [kpod("p", reqs=[("test-key", "In", ["another-value"])])]
    )
    assert not c.scheduled("p")


# --- Well Known Labels ----------------------------------------------------------------------------

WK = f"{CC}/Well Known Labels"


@karpenter(f"{WK}/should use NodePool constraints")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ZONE, "In", Z2))], [kpod("p")])
    assert labels_of(c, "p")[ZONE] == Z2


@karpenter(f"{WK}/should use node selectors")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ZONE, "In", Z1, Z2))], [kpod("p", node_selector={ZONE: Z2})])
    assert labels_of(c, "p")[ZONE] == Z2


@karpenter(f"{WK}/should not schedule nodes with a hostname selector")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", node_selector={HOST: "red-node"})])
    assert not c.scheduled("p")


@karpenter(f"{WK}/should not schedule the pod if nodeselector unknown")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ZONE, "In", Z1))], [kpod("p", node_selector={ZONE: "unknown"})])
    assert not c.scheduled("p")


@karpenter(f"{WK}/should not schedule if node selector outside of NodePool constraints")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ZONE, "In", Z1))], [kpod("p", node_selector={ZONE: Z2})])
    assert not c.scheduled("p")


@karpenter(f"{WK}/should schedule compatible requirements with Operator=In")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(ZONE, "In", [Z3])])])
    assert labels_of(c, "p")[ZONE] == Z3


@karpenter(f"{WK}/should schedule compatible requirements with Operator=Gt")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req("karpenter.k8s.aws/instance-cpu", "Gt", "8"))], [kpod("p")])
    assert labels_of(c, "p")["karpenter.k8s.aws/instance-cpu"] == "16"


@karpenter(f"{WK}/should schedule compatible requirements with Operator=Lt")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req("karpenter.k8s.aws/instance-cpu", "Lt", "4"))], [kpod("p")])
    assert labels_of(c, "p")["karpenter.k8s.aws/instance-cpu"] == "2"


@karpenter(f"{WK}/should not schedule incompatible preferences and requirements with Operator=In")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(ZONE, "In", ["unknown"])])])
    assert not c.scheduled("p")


@karpenter(f"{WK}/should schedule compatible requirements with Operator=NotIn")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(ZONE, "NotIn", [Z1, Z2, "unknown"])])])
    assert labels_of(c, "p")[ZONE] == Z3


@karpenter(f"{WK}/should not schedule incompatible preferences and requirements with Operator=NotIn")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(ZONE, "NotIn", [Z1, Z2, Z3, "unknown"])])])
    assert not c.scheduled("p")


ALL_ZONES = [Z1, Z2, Z3, "unknown"]


@karpenter(f"{WK}/should schedule compatible preferences and requirements with Operator=In")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(ZONE, "In", ALL_ZONES)], prefs=[(1, [(ZONE, "In", [Z2, "unknown"])])])])
    assert labels_of(c, "p")[ZONE] == Z2


@karpenter(f"{WK}/should schedule incompatible preferences and requirements with Operator=In")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(ZONE, "In", ALL_ZONES)], prefs=[(1, [(ZONE, "In", ["unknown"])])])])
    assert c.scheduled("p")


@karpenter(f"{WK}/should schedule compatible preferences and requirements with Operator=NotIn")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(ZONE, "In", ALL_ZONES)], prefs=[(1, [(ZONE, "NotIn", [Z1, Z3])])])])
    assert labels_of(c, "p")[ZONE] == Z2


@karpenter(f"{WK}/should schedule incompatible preferences and requirements with Operator=NotIn")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(ZONE, "In", ALL_ZONES)], prefs=[(1, [(ZONE, "NotIn", [Z1, Z2, Z3])])])])
    assert c.scheduled("p")


@karpenter(f"{WK}/should schedule compatible node selectors, preferences and requirements")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool()],
        [kpod("p", node_selector={ZONE: Z3}, reqs=[(ZONE, "In", ALL_ZONES)], prefs=[(1, [(ZONE, "NotIn", [Z1, Z2])])])],
    )
    assert labels_of(c, "p")[ZONE] == Z3


@karpenter(f"{WK}/should combine multidimensional node selectors, preferences and requirements")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", ANY_ARCH)],
        [
            kpod(
                "p",
                node_selector={ZONE: Z3, IT: "m6g.large"},
                reqs=[(ZONE, "In", [Z2, Z3]), (IT, "In", ["m5.large", "m6g.large"])],
                prefs=[(1, [(ZONE, "NotIn", ["unknown"]), (IT, "NotIn", ["unknown"])])],
            )
        ],
    )
    labels = labels_of(c, "p")
    assert (labels[ZONE], labels[IT]) == (Z3, "m6g.large")


@karpenter(f"{WK}/should schedule pods that have node selectors with label in wellknown label list")
def _(c: Cluster) -> None:
    names = ["zone", "type", "arch", "os", "ct"]
    pods = [
        kpod("zone", node_selector={ZONE: Z1}),
        kpod("type", node_selector={IT: "m5.large"}),
        kpod("arch", node_selector={ARCH: "arm64"}),
        kpod("os", node_selector={"kubernetes.io/os": "linux"}),
        kpod("ct", node_selector={CT: "spot"}),
    ]
    c.provision([nodepool("default", ANY_ARCH)], pods)
    assert all(c.scheduled(n) for n in names), c.unschedulable


# --- Scheduling Logic -----------------------------------------------------------------------------

SL = f"{CC}/Scheduling Logic"
TK = "test-key"


@karpenter(f"{SL}/should not schedule pods that have node selectors with In operator and undefined key")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(TK, "In", ["test-value"])])])
    assert not c.scheduled("p")


@karpenter(f"{SL}/should schedule pods that have node selectors with NotIn operator and undefined key")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(TK, "NotIn", ["test-value"])])])
    assert labels_of(c, "p").get(TK) != "test-value"


@karpenter(f"{SL}/should not schedule pods that have node selectors with Exists operator and undefined key")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(TK, "Exists", [])])])
    assert not c.scheduled("p")


@karpenter(f"{SL}/should schedule pods that with DoesNotExists operator and undefined key")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(TK, "DoesNotExist", [])])])
    assert TK not in labels_of(c, "p")


@karpenter(f"{SL}/should schedule unconstrained pods that don't have matching node selectors")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(TK, "In", "test-value"))], [kpod("p")])
    assert labels_of(c, "p")[TK] == "test-value"


@karpenter(f"{SL}/should schedule pods that have node selectors with matching value and In operator")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(TK, "In", "test-value"))], [kpod("p", reqs=[(TK, "In", ["test-value"])])])
    assert labels_of(c, "p")[TK] == "test-value"


@karpenter(f"{SL}/should not schedule pods that have node selectors with matching value and NotIn operator")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(TK, "In", "test-value"))], [kpod("p", reqs=[(TK, "NotIn", ["test-value"])])])
    assert not c.scheduled("p")


@karpenter(f"{SL}/should schedule the pod with Exists operator and defined key")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(TK, "In", "test-value"))], [kpod("p", reqs=[(TK, "Exists", [])])])
    assert c.scheduled("p")


@karpenter(f"{SL}/should not schedule the pod with DoesNotExists operator and defined key")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(TK, "In", "test-value"))], [kpod("p", reqs=[(TK, "DoesNotExist", [])])])
    assert not c.scheduled("p")


@karpenter(f"{SL}/should not schedule pods that have node selectors with different value and In operator")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(TK, "In", "test-value"))], [kpod("p", reqs=[(TK, "In", ["another-value"])])])
    assert not c.scheduled("p")


@karpenter(f"{SL}/should schedule pods that have node selectors with different value and NotIn operator")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", req(TK, "In", "test-value"))], [kpod("p", reqs=[(TK, "NotIn", ["another-value"])])]
    )
    assert labels_of(c, "p")[TK] == "test-value"


@karpenter(f"{SL}/should schedule compatible pods to the same node")
def _(c: Cluster) -> None:
    # item 11: compatible requirements share a node
    c.provision(
        [nodepool("default", req(TK, "In", "test-value", "another-value"))],
        [kpod("a", reqs=[(TK, "In", ["test-value"])]), kpod("b", reqs=[(TK, "NotIn", ["another-value"])])],
    )
    assert labels_of(c, "a")[TK] == labels_of(c, "b")[TK] == "test-value"
    assert c.node_of("a") == c.node_of("b")


@karpenter(f"{SL}/should schedule incompatible pods to the different node")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", req(TK, "In", "test-value", "another-value"))],
        [kpod("a", reqs=[(TK, "In", ["test-value"])]), kpod("b", reqs=[(TK, "In", ["another-value"])])],
    )
    assert (labels_of(c, "a")[TK], labels_of(c, "b")[TK]) == ("test-value", "another-value")
    assert c.node_of("a") != c.node_of("b")


@karpenter(f"{SL}/Exists operator should not overwrite the existing value")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", reqs=[(ZONE, "In", ["non-existent-zone"]), (ZONE, "Exists", [])])])
    assert not c.scheduled("p")


# --- Preferential Fallback ------------------------------------------------------------------------

PF = "Preferential Fallback"


@karpenter(f"{PF}/Required/should not relax the final term")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", req(ZONE, "In", Z1), req(IT, "In", "m5.large"))],
        [kpod("p", terms=[[(ZONE, "In", ["invalid"])]])],
    )
    assert not c.scheduled("p")


@karpenter(f"{PF}/Required/should relax multiple terms")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool()],
        [
            kpod(
                "p",
                terms=[
                    [(ZONE, "In", ["invalid"])],
                    [(ZONE, "In", ["invalid"])],
                    [(ZONE, "In", [Z1])],
                    [(ZONE, "In", [Z2])],
                ],
            )
        ],
    )
    assert labels_of(c, "p")[ZONE] == Z1


@karpenter(f"{PF}/Preferred/should relax all terms")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", prefs=[(1, [(ZONE, "In", ["invalid"])]), (1, [(IT, "In", ["invalid"])])])])
    assert c.scheduled("p")


@karpenter(f"{PF}/Preferred/should relax to use lighter weights")
def _(c: Cluster) -> None:
    # item 8: the heaviest preference alone first, then the next heaviest alone
    c.provision(
        [nodepool("default", req(ZONE, "In", Z1, Z2))],
        [kpod("p", prefs=[(100, [(IT, "In", [Z3])]), (50, [(ZONE, "In", [Z2])]), (1, [(ZONE, "In", [Z1])])])],
    )
    assert labels_of(c, "p")[ZONE] == Z2


@karpenter(f"{PF}/Preferred/should schedule even if preference is conflicting with requirement")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", prefs=[(1, [(ZONE, "NotIn", [Z3])])], reqs=[(ZONE, "In", [Z3])])])
    assert labels_of(c, "p")[ZONE] == Z3


@karpenter(f"{PF}/Preferred/should schedule even if preference requirements are conflicting")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", prefs=[(1, [(ZONE, "In", ["invalid"]), (ZONE, "NotIn", ["invalid"])])])])
    assert c.scheduled("p")


# --- Instance Type Compatibility ------------------------------------------------------------------

ITC = "Instance Type Compatibility"


@karpenter(f"{ITC}/should not schedule if requesting more resources than any instance type has")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", cpu=512_000)])
    assert not c.scheduled("p") and "exceed" in c.unschedulable["p"]


@karpenter(f"{ITC}/should launch pods with different archs on different instances")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", ANY_ARCH)],
        [kpod("a", node_selector={ARCH: "amd64"}), kpod("b", node_selector={ARCH: "arm64"})],
    )
    assert c.node_of("a") != c.node_of("b") and c.scheduled("a") and c.scheduled("b")


@karpenter(
    f"{ITC}/should exclude instance types that are not supported by the pod constraints (node affinity/instance type)"
)
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ARCH, "In", "amd64"))], [kpod("p", reqs=[(IT, "In", ["m6g.large"])])])
    assert not c.scheduled("p")


@karpenter(
    f"{ITC}/should exclude instance types that are not supported by the pod constraints (node affinity/"
    "operating system)"
)
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", req(ARCH, "In", "amd64"))], [kpod("p", reqs=[("kubernetes.io/os", "In", ["ios"])])]
    )
    assert not c.scheduled("p")


@karpenter(f"{ITC}/should launch pods with different instance type node selectors on different instances")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", ANY_ARCH)],
        [kpod("a", node_selector={IT: "m5.large"}), kpod("b", node_selector={IT: "c5.large"})],
    )
    assert c.node_of("a") != c.node_of("b") and c.scheduled("a") and c.scheduled("b")


@karpenter(f"{ITC}/should launch pods with different zone selectors on different instances")
def _(c: Cluster) -> None:
    c.provision(
        [nodepool("default", ANY_ARCH)], [kpod("a", node_selector={ZONE: Z1}), kpod("b", node_selector={ZONE: Z2})]
    )
    assert c.node_of("a") != c.node_of("b") and c.scheduled("a") and c.scheduled("b")


@karpenter(f"{ITC}/should fail to schedule a pod with resources requests that aren't on a single instance type")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", extra={"nvidia.com/gpu": 1, "example.com/fpga": 1})])
    assert not c.scheduled("p")


# --- Binpacking / In-Flight / Existing ------------------------------------------------------------


@karpenter("Binpacking/should schedule a small pod on the smallest instance")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(CT, "In", "on-demand"))], [kpod("p", cpu=0, memory=100 * 10**6)])
    assert labels_of(c, "p")[IT] == "c5.large"


@karpenter("Binpacking/should create new nodes when a node is at capacity")
def _(c: Cluster) -> None:
    pods = kpods(40, cpu=1800, memory=GI)
    c.provision([nodepool("default", req(IT, "In", "c5.large"))], pods)
    assert len(c.nodes) == 40 and all(c.scheduled(p.name) for p in pods)


@karpenter("Binpacking/should pack small and large pods together")
def _(c: Cluster) -> None:
    large = kpods(4, cpu=1000)
    small = kpods(8, cpu=100)
    c.provision([nodepool("default", req(IT, "In", "m5.2xlarge"))], large + small)
    assert len(c.nodes) == 1


@karpenter("Binpacking/should not schedule pods that exceed every instance type's capacity")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("p", memory=2 * 1024 * GI)])
    assert not c.scheduled("p")


@karpenter("Binpacking/should create new nodes when a node is at capacity due to pod limits per node")
def _(c: Cluster) -> None:
    # c5.large holds 29 pods
    pods = kpods(40, cpu=1, memory=1)
    c.provision([nodepool("default", req(IT, "In", "c5.large"))], pods)
    assert len(c.nodes) == 2 and all(c.scheduled(p.name) for p in pods)


@karpenter("In-Flight Nodes/should not launch a second node if there is an in-flight node that can support the pod")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("first", cpu=100)])
    c.provision([nodepool()], [kpod("second", cpu=100)])
    assert len(c.nodes) == 1 and c.node_of("second") == c.node_of("first")


@karpenter("In-Flight Nodes/should launch a second node if a pod won't fit on the existingNodes node")
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(IT, "In", "c5.large"))], [kpod("first", cpu=1000)])
    c.provision([nodepool("default", req(IT, "In", "c5.large"))], [kpod("second", cpu=1000)])
    assert len(c.nodes) == 2


@karpenter(
    "In-Flight Nodes/should launch a second node if a pod isn't compatible with the existingNodes node (node selector)"
)
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("first")])
    c.provision([nodepool()], [kpod("second", node_selector={ARCH: "arm64"})])
    assert c.node_of("first") != c.node_of("second")


@karpenter("In-Flight Nodes/should schedule pods with the same host port to different nodes")
def _(c: Cluster) -> None:
    c.provision([nodepool()], [kpod("a", ports=[80]), kpod("b", ports=[80])])
    assert c.node_of("a") != c.node_of("b")


@karpenter("In-Flight Nodes/Topology/should balance pods across zones with in-flight nodes")
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(4, labels=LABELS, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [1, 1, 2]
    c.provision([nodepool()], kpods(5, labels=LABELS, spreads=[spread(ZONE)]))
    assert c.skew(ZONE) == [3, 3, 3]


@karpenter(
    "In-Flight Nodes/Topology/should balance pods across hostnames with in-flight nodes",
    difference="hostname spread counts a new node as a domain with no pods",
)
def _(c: Cluster) -> None:
    c.provision([nodepool()], kpods(4, labels=LABELS, spreads=[spread(HOST)]))
    assert c.skew(HOST) == [1, 1, 1, 1]
    c.provision([nodepool()], kpods(5, labels=LABELS, spreads=[spread(HOST)]))
    # Karpenter stacks a second pod on each of the 4 nodes ([1, 1, 1, 1, 1, 2, 2, 2, 2]); a new node is always
    # possible, so we keep one per node (skew 0 rather than 1 once those nodes exist)
    assert c.skew(HOST) == [1] * 9


@karpenter("In-Flight Nodes/Taints/should not assume pod will schedule to a tainted node")
def _(c: Cluster) -> None:
    c.nodes.append(node("tainted", {ZONE: Z1}, taints=[Taint("foo", "NoSchedule", "bar")]))
    c.provision([nodepool()], [kpod("p")])
    assert c.node_of("p") != c.nodes[0]


@karpenter("Existing Nodes/should schedule a pod to an existing node unowned by Karpenter")
def _(c: Cluster) -> None:
    c.nodes.append(node("byo", {ZONE: Z1}))
    c.provision([nodepool()], [kpod("p")])
    assert labels_of(c, "p")[HOST] == "byo" and len(c.nodes) == 1


@karpenter("Existing Nodes/should consider a pod incompatible with an existing node but compatible with NodePool")
def _(c: Cluster) -> None:
    c.nodes.append(node("byo", {ZONE: Z1}))
    c.provision([nodepool()], [kpod("p", node_selector={ZONE: Z2})])
    assert labels_of(c, "p")[ZONE] == Z2


@karpenter(
    "NodePool requirements instance filtering/should handle zone requirements that filter out all instance types"
)
def _(c: Cluster) -> None:
    c.provision([nodepool("default", req(ZONE, "In", "us-west-2a"))], [kpod("p")])
    assert not c.scheduled("p") and "offering" in c.unschedulable["p"]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_karpenter_suite(case: Case) -> None:
    case.run(Cluster())


# --- issue 15, one test per item ------------------------------------------------------------------


def test_issue15_item_1_spread_uses_only_domains_a_pool_can_launch_in() -> None:
    # Given a spot NodePool at its limit, an on-demand one, and 4 pods spreading on capacity type (ScheduleAnyway)
    c = Cluster()
    pools = [nodepool("spot", req(CT, "In", "spot"), limits={"cpu": "0"}), nodepool("od", req(CT, "In", "on-demand"))]
    pods = kpods(4, labels=LABELS, spreads=[spread(CT, when="ScheduleAnyway")])
    # When provisioning
    c.provision(pools, pods)
    # Then every pod goes on-demand instead of waiting for the spot pool
    assert all(c.scheduled(p.name) for p in pods), c.unschedulable
    assert c.skew(CT) == [4]
    # And with DoNotSchedule, a zone only an existing node has bounds the skew (maxSkew 1: 1 / 2 / 2)
    c = Cluster()
    c.provision([nodepool()], [kpod(labels=LABELS, cpu=1100, node_selector={ZONE: Z3})])
    c.provision(
        [nodepool("default", req(ZONE, "In", Z1, Z2))], kpods(6, labels=LABELS, cpu=1100, spreads=[spread(ZONE)])
    )
    assert c.skew(ZONE) == [1, 2, 2]
    assert all("zone(s) []" not in r for r in c.unschedulable.values())


def test_issue15_item_2_affinity_sees_pods_pending_in_the_same_batch() -> None:
    sel = LabelSelector(match_labels=(("app", "db"),))
    # Given a target pinned to zone a and a pod with zone anti-affinity to it, pending together
    c = Cluster()
    c.provision(
        [nodepool()], [kpod("db", labels={"app": "db"}, node_selector={ZONE: Z1}), kpod("anti", anti=[term(ZONE, sel)])]
    )
    # Then the anti-affinity pod is on another zone (and so another node)
    assert labels_of(c, "anti")[ZONE] != Z1
    # Given followers with hostname and zone affinity to a pending target
    c = Cluster()
    c.provision(
        [nodepool()],
        [kpod("db", labels={"app": "db"}), kpod("host", aff=[term(HOST, sel)]), kpod("zone", aff=[term(ZONE, sel)])],
    )
    # Then they follow it
    assert c.node_of("host") == c.node_of("db")
    assert labels_of(c, "zone")[ZONE] == labels_of(c, "db")[ZONE]
    # Given existing pods whose required zone anti-affinity excludes a new pod in every zone
    c = Cluster()
    c.provision(
        [nodepool()],
        [kpod(f"z{i}", cpu=2000, node_selector={ZONE: z}, anti=[term(ZONE, sel)]) for i, z in enumerate((Z1, Z2, Z3))],
    )
    c.provision([nodepool()], [kpod("new-db", labels={"app": "db"})])
    # Then the new pod is reported, not launched
    assert not c.scheduled("new-db") and "anti-affinity" in c.unschedulable["new-db"]


@pytest.mark.parametrize("key", [ARCH, "team", "unknown.example.com/key"])
def test_issue15_item_3_any_label_key_is_a_topology_key(key: str) -> None:
    # Given pods spreading (maxSkew 1) on a key: arch (instance types), team (NodePool requirement), unknown
    c = Cluster()
    pool = nodepool("default", ANY_ARCH, req("team", "In", "a", "b"))
    pods = kpods(4, labels=LABELS, cpu=1000, spreads=[spread(key)])
    c.provision([pool], pods)
    if key.startswith("unknown"):
        # Then a key no NodePool or node has is reported with the key named
        assert not any(c.scheduled(p.name) for p in pods)
        assert all(key in r for r in c.unschedulable.values())
    else:
        # Then the pods are split 2 / 2 over its values
        assert c.skew(key) == [2, 2]


def test_issue15_item_4_preferred_node_affinity_does_not_narrow_spread_domains() -> None:
    # Given an existing (full) node in zone c and 6 pods preferring zones a, b with zone spread
    c = Cluster()
    c.nodes.append(node("full-c", {ZONE: Z3}, cpu=0))
    pods = kpods(6, labels=LABELS, spreads=[spread(ZONE)], prefs=[(1, [(ZONE, "In", [Z1, Z2])])])
    c.provision([nodepool()], pods)
    # Then the preference gives way to the spread: 2 / 2 / 2
    assert c.skew(ZONE) == [2, 2, 2]


def test_issue15_item_8_heaviest_preferred_node_affinity_is_kept() -> None:
    # Given weights 100 (impossible), 50 (zone b) and 1 (zone a)
    c = Cluster()
    c.provision(
        [nodepool()],
        [kpod("p", prefs=[(1, [(ZONE, "In", [Z1])]), (100, [(IT, "In", ["none"])]), (50, [(ZONE, "In", [Z2])])])],
    )
    # Then the heaviest satisfiable one wins
    assert labels_of(c, "p")[ZONE] == Z2


def test_issue15_item_9_prefer_no_schedule_taint_is_avoided() -> None:
    # Given a heavier NodePool with a PreferNoSchedule taint and a clean one
    tainted = nodepool("tainted", weight=50, taints=[{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}])
    clean = nodepool("clean")
    c = Cluster()
    c.provision([tainted, clean], [kpod("p"), kpod("tolerates", tolerations=[toleration("soft", op="Exists")])])
    # Then the pod that does not tolerate it goes to the clean pool; the one that does keeps the weight order
    assert labels_of(c, "p")["karpenter.sh/nodepool"] == "clean"
    assert labels_of(c, "tolerates")["karpenter.sh/nodepool"] == "tainted"


def test_issue15_item_10_min_values_splits_pods_over_nodes() -> None:
    # Given two 3.5-CPU pods and instance-type In [m5.xlarge, m5.2xlarge] with minValues 2
    pool = nodepool("default", req(IT, "In", "m5.xlarge", "m5.2xlarge", min_values=2))
    c = Cluster()
    result = c.provision([pool], kpods(2, cpu=3500))
    # Then each goes on its own node, whose list has both types
    assert not result.unschedulable, result.unschedulable
    assert len(result.launches) == 2
    assert all(set(ln.instance_types) == {"m5.xlarge", "m5.2xlarge"} for ln in result.launches)


def test_issue15_item_11_compatible_requirements_share_a_node() -> None:
    pool = nodepool("default", req("team", "In", "x", "y"))
    c = Cluster()
    result = c.provision([pool], [kpod("a", reqs=[("team", "In", ["x"])]), kpod("b", reqs=[("team", "NotIn", ["y"])])])
    assert len(result.launches) == 1 and result.launches[0].labels["team"] == "x"


def test_issue15_item_12_template_zone_label_constrains_the_pool() -> None:
    c = Cluster()
    result = c.provision([nodepool(labels={ZONE: Z2})], kpods(3, cpu=1500))
    assert result.launches and all(ln.zones == (Z2,) for ln in result.launches)
    c = Cluster()
    c.provision([nodepool(labels={ZONE: Z2})], [kpod("p", node_selector={ZONE: Z1})])
    assert not c.scheduled("p")


def test_issue15_item_13_oversized_daemonset_overhead_is_named() -> None:
    # Given a DaemonSet that asks more CPU than any instance type has
    ds = DaemonSet("kube-system", "huge", kpod("huge-ds", cpu=64_000))
    c = Cluster(daemonsets=[ds])
    c.provision([nodepool()], [kpod("p")])
    # Then the reason names the DaemonSet overhead, not empty requests
    reason = c.unschedulable["p"]
    assert "requests ()" not in reason
    assert "DaemonSet" in reason and "cpu=100m" in reason


def test_every_documented_difference_is_listed_in_the_differences_page() -> None:
    # Given every ported case marked as a deliberate difference (both tables)
    from pathlib import Path

    from tests.domain.test_karpenter_scheduling_topology import CASES as TOPOLOGY

    page = (Path(__file__).parents[2] / "docs" / "differences-from-karpenter.md").read_text().lower()
    marked = {c.difference for c in (*CASES, *TOPOLOGY) if c.difference}
    # Then each has its entry on docs/differences-from-karpenter.md
    assert marked
    for difference in marked:
        assert difference.lower() in page, difference


# --- Instance Type Selection (instance_selection_test.go) -----------------------------------------
# Each case: NodePool requirements, pod requirements; Karpenter asserts the node is one of the cheapest
# offerings allowed and every instance type in the launch request satisfies both.

SELECTION = [
    ("should schedule on one of the cheapest instances", [], []),
    ("should schedule on one of the cheapest instances (pod arch = amd64)", [], [(ARCH, "In", ["amd64"])]),
    ("should schedule on one of the cheapest instances (pod arch = arm64)", [], [(ARCH, "In", ["arm64"])]),
    ("should schedule on one of the cheapest instances (prov arch = amd64)", [(ARCH, "In", ["amd64"])], []),
    ("should schedule on one of the cheapest instances (prov arch = arm64)", [(ARCH, "In", ["arm64"])], []),
    ("should schedule on one of the cheapest instances (pod os = linux)", [], [("kubernetes.io/os", "In", ["linux"])]),
    ("should schedule on one of the cheapest instances (prov zone = test-zone-2)", [(ZONE, "In", [Z2])], []),
    ("should schedule on one of the cheapest instances (pod zone = test-zone-2)", [], [(ZONE, "In", [Z2])]),
    ("should schedule on one of the cheapest instances (prov ct = spot)", [(CT, "In", ["spot"])], []),
    ("should schedule on one of the cheapest instances (pod ct = spot)", [], [(CT, "In", ["spot"])]),
    (
        "should schedule on one of the cheapest instances (prov ct = ondemand, prov zone = test-zone-1)",
        [(CT, "In", ["on-demand"]), (ZONE, "In", [Z1])],
        [],
    ),
    (
        "should schedule on one of the cheapest instances (pod ct = spot, pod zone = test-zone-1)",
        [],
        [(CT, "In", ["spot"]), (ZONE, "In", [Z1])],
    ),
    (
        "should schedule on one of the cheapest instances (prov ct = spot, pod zone = test-zone-2)",
        [(CT, "In", ["spot"])],
        [(ZONE, "In", [Z2])],
    ),
    (
        "should schedule on one of the cheapest instances (prov = spot/test-zone-2, pod = amd64/linux)",
        [(CT, "In", ["spot"]), (ZONE, "In", [Z2])],
        [(ARCH, "In", ["amd64"]), ("kubernetes.io/os", "In", ["linux"])],
    ),
    (
        "should schedule on one of the cheapest instances (pod ct = spot/test-zone-2/amd64/linux)",
        [],
        [(CT, "In", ["spot"]), (ZONE, "In", [Z2]), (ARCH, "In", ["amd64"]), ("kubernetes.io/os", "In", ["linux"])],
    ),
    (
        "should not schedule if no instance type matches selector (pod arch = arm)",
        [(ARCH, "In", ["amd64"])],
        [(ARCH, "In", ["arm64"])],
    ),
    (
        "should not schedule if no instance type matches selector (prov arch = arm / pod zone=test-zone-2)",
        [(ARCH, "In", ["arm64"]), (ZONE, "In", [Z1])],
        [(ZONE, "In", [Z2])],
    ),
]


@pytest.mark.parametrize(("name", "pool_reqs", "pod_reqs"), SELECTION, ids=[s[0] for s in SELECTION])
def test_karpenter_instance_selection(name: str, pool_reqs: list[Any], pod_reqs: list[Any]) -> None:
    from autoscaler.domain.labels import instance_type_labels
    from autoscaler.domain.models import Requirement
    from autoscaler.domain.nodepool import requirement_allows
    from tests.domain.scheduling_world import TYPES, offerings

    # Given the NodePool (any arch, any capacity type unless narrowed) and a pod with requirements
    reqs = [req(k, op, *v) for k, op, v in pool_reqs]
    if not any(r["key"] == ARCH for r in reqs):
        reqs.append(req(ARCH, "In", "amd64", "arm64"))
    c = Cluster()
    # When provisioning
    result = c.provision([nodepool("default", *reqs)], [kpod("p", cpu=100, reqs=pod_reqs)])
    every = [Requirement(k, op, tuple(v)) for k, op, v in (*pool_reqs, *pod_reqs)]

    def allowed(labels: dict[str, str]) -> bool:
        return all(requirement_allows(r, labels.get(r.key)) for r in every)

    types = {t.name: t for t in TYPES}
    cheapest = min(
        (
            o.price
            for o in offerings()
            if allowed({**instance_type_labels(types[o.instance_type]), ZONE: o.zone, CT: o.capacity_type})
        ),
        default=None,
    )
    if name.startswith("should not schedule"):
        # Then nothing is launched
        assert cheapest is None and not result.launches
        return
    # Then the node is one of the cheapest allowed and every listed type satisfies the requirements
    (launch,) = result.launches
    assert launch.hourly_price == cheapest
    for t in launch.instance_types:
        for z in launch.zones:
            assert allowed({**instance_type_labels(types[t]), ZONE: z, CT: launch.capacity_type}), t


def test_karpenter_instance_selection_min_values_respected() -> None:
    # Instance Type Selection/MinValues/should schedule respecting the minValues from instance-type requirements
    pool = nodepool("default", req(IT, "In", "m5.large", "m5.xlarge", "c5.large", min_values=2))
    result = Cluster().provision([pool], [kpod("p")])
    (launch,) = result.launches
    assert len(set(launch.instance_types)) >= 2
    # MinValues/schedule should fail if minimum number of InstanceTypes is not met as per the minValues
    pool = nodepool("default", req(IT, "Exists", min_values=20))  # the catalogue has 10 types
    c = Cluster()
    c.provision([pool], [kpod("p")])
    assert not c.scheduled("p") and "minValues" in c.unschedulable["p"]


def _raw_pod(name: str, *, labels: dict[str, str] | None = None, ns: str = "default", **spec: Any) -> Pod:
    from autoscaler.domain.objects import pod_from_dict

    containers = [
        {
            "name": "c",
            "image": "i",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            **({"ports": spec.pop("ports")} if "ports" in spec else {}),
        }
    ]
    return pod_from_dict(
        {
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"containers": containers, **spec},
            "status": {"phase": "Pending"},
        }
    )


def test_issue15_item_5_generic_ephemeral_volumes_pin_the_zone() -> None:
    from autoscaler.domain.models import PersistentVolume, PersistentVolumeClaim, StorageClass

    volume = {"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3"}}}}
    # Given a pod whose ephemeral volume's claim (db-data) is bound in zone c
    c = Cluster()
    c.provision(
        [nodepool()],
        [_raw_pod("db", volumes=[volume])],
        pvcs=[PersistentVolumeClaim("default", "db-data", "gp3", "pv-1")],
        pvs=[PersistentVolume("pv-1", (Z3,))],
        storage_classes=[StorageClass("gp3", "WaitForFirstConsumer")],
    )
    # Then its node is in zone c
    assert labels_of(c, "db")[ZONE] == Z3
    # Given the claim is not created yet: the template's StorageClass topology applies
    c = Cluster()
    c.provision(
        [nodepool()],
        [_raw_pod("web", volumes=[volume])],
        storage_classes=[StorageClass("gp3", "WaitForFirstConsumer", (Z2,))],
    )
    assert labels_of(c, "web")[ZONE] == Z2


def test_issue15_item_6_daemonset_host_ports_are_taken_on_new_nodes() -> None:
    # Given node-exporter on every node with hostPort 9100
    exporter = DaemonSet("monitoring", "node-exporter", kpod("node-exporter", cpu=10, ports=[9100]))
    c = Cluster(daemonsets=[exporter])
    # When a pod wants host port 9100, and another 9200
    c.provision([nodepool()], [kpod("clash", ports=[9100]), kpod("free", ports=[9200])])
    # Then the first is reported naming the DaemonSet, and the second is launched
    assert not c.scheduled("clash") and "DaemonSet monitoring/node-exporter" in c.unschedulable["clash"]
    assert c.scheduled("free")


def test_issue15_item_7_match_label_keys_and_empty_namespace_selector() -> None:
    # Topology/MatchLabelKeys/should support matchLabelKeys: two ReplicaSets of one Deployment spread
    # independently by pod-template-hash, so each node holds one pod of each
    tsc = [
        {
            "maxSkew": 1,
            "topologyKey": HOST,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "matchLabelKeys": ["pod-template-hash"],
        }
    ]
    pods = [
        _raw_pod(f"web-{h}-{i}", labels={"app": "web", "pod-template-hash": h}, topologySpreadConstraints=tsc)
        for h in ("a", "b")
        for i in range(2)
    ]
    c = Cluster()
    c.provision([nodepool()], pods)
    assert all(c.scheduled(p.name) for p in pods) and len(c.nodes) == 2
    # Topology/Pod Affinity/Anti-Affinity/should filter pod affinity topologies by namespace, empty namespace
    # selector: an empty namespaceSelector matches the target in another namespace
    follower = _raw_pod(
        "follower",
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"security": "s2"}}, "namespaceSelector": {}, "topologyKey": HOST}
                ]
            }
        },
    )
    c = Cluster()
    c.provision([nodepool()], [_raw_pod("target", labels={"security": "s2"}, ns="other"), follower])
    assert c.node_of("follower") == c.node_of("target") and c.scheduled("target")


def test_issue15_item_14_extended_resources_pack_by_size() -> None:
    from autoscaler.domain.models import InstanceType, Offering
    from autoscaler.domain.plan import PlanInput
    from autoscaler.domain.scheduling import plan
    from tests.domain.scheduling_world import NODE_CLASS

    # Given g6.xlarge (1 GPU, $0.8048/h) and g6.48xlarge (8 GPUs, $13.3504/h), two 1-GPU pods and one 8-GPU pod
    small = InstanceType(
        "g6.xlarge",
        "amd64",
        vcpus=4,
        memory_mib=16384,
        max_enis=4,
        ipv4_per_eni=15,
        gpu_count=1,
        gpu_manufacturer="NVIDIA",
        gpu_name="L4",
        hypervisor="nitro",
    )
    large = InstanceType(
        "g6.48xlarge",
        "amd64",
        vcpus=192,
        memory_mib=786432,
        max_enis=15,
        ipv4_per_eni=50,
        gpu_count=8,
        gpu_manufacturer="NVIDIA",
        gpu_name="L4",
        hypervisor="nitro",
    )
    offers = [Offering("g6.xlarge", Z1, "on-demand", 0.8048), Offering("g6.48xlarge", Z1, "on-demand", 13.3504)]
    gpu = "nvidia.com/gpu"
    pods = [
        kpod("one-a", cpu=1000, extra={gpu: 1}),
        kpod("one-b", cpu=1000, extra={gpu: 1}),
        kpod("eight", cpu=8000, memory=64 * GI, extra={gpu: 8}),
    ]
    snap = PlanInput(
        node_pools=[nodepool("gpu", req(CT, "In", "on-demand"), req("karpenter.k8s.aws/instance-family", "In", "g6"))],
        node_classes={"default": NODE_CLASS},
        pods=pods,
        instance_types=[small, large],
        offerings=offers,
    )
    # When planning
    result = plan(snap)
    # Then the 8-GPU pod gets the large node and the 1-GPU pods small ones: $14.96/h, not 2 large at $26.70/h
    assert not result.unschedulable
    assert sorted(ln.instance_types[0] for ln in result.launches) == ["g6.48xlarge", "g6.xlarge", "g6.xlarge"]
    assert round(result.hourly_price, 2) == 14.96


def test_issue15_item_3_anti_affinity_on_capacity_type_and_custom_keys_is_symmetric() -> None:
    sel = LabelSelector(match_labels=(("app", "b"),))
    # Given a bound on-demand pod whose anti-affinity on capacity type excludes app=b
    pools = [nodepool("default", ANY_ARCH), nodepool("od", req(CT, "In", "on-demand"))]
    c = Cluster()
    c.provision(pools, [kpod("anti", labels={"app": "b"}, anti=[term(CT, sel)], reqs=[(CT, "In", ["on-demand"])])])
    # When another app=b pod comes
    c.provision(pools, [kpod("b", labels={"app": "b"})])
    # Then it goes spot
    assert labels_of(c, "b")[CT] == "spot"
    # And when spot cannot be launched (its only pool at its limit), it is reported rather than put on-demand
    pools = [nodepool("default", ANY_ARCH, req(CT, "In", "spot"), limits={"cpu": "0"}), pools[1]]
    c.provision(pools, [kpod("b2", labels={"app": "b"}, cpu=1900)])  # too big for the spot node b is on
    assert not c.scheduled("b2") and "anti-affinity" in c.unschedulable["b2"]


@pytest.mark.parametrize("key", [CT, ARCH, ZONE])
def test_spread_counts_pods_of_every_class_with_the_same_selector(key: str) -> None:
    # Given one app's pods of three sizes (three classes) spreading with maxSkew 1
    sel = LabelSelector(match_labels=(("app", "s"),))
    pods = [kpod(labels={"app": "s"}, cpu=cpu, spreads=[spread(key, sel=sel)]) for cpu in (100, 700, 1500, 100)]
    c = Cluster()
    # When provisioning
    c.provision([nodepool("default", ANY_ARCH)], pods)
    # Then the skew holds across the classes, not per class
    counts = c.skew(key, sel)
    assert all(c.scheduled(p.name) for p in pods)
    assert max(counts) - (min(counts) if len(counts) == (3 if key == ZONE else 2) else 0) <= 1, counts
