"""The simulator's kube-scheduler oracle (``simulator/sim/scheduler.py``) held to the real kube-scheduler.

The oracle decides where pods land in every simulation, so it must be as strict as what it stands for. Each
case below (nodes with allocatable, labels, taints and ``unschedulable``; pods already bound; pending pods in
creation order) runs on the real kube-scheduler of ``tests/real_kube.py`` (``[real]``) and on the oracle
(``[oracle]``), and both must reach the case's expected outcome: the same pods bound and pending, each bound pod
on the one feasible node, or on one of the nodes the case lists where scores tie (kube-scheduler breaks ties at
random; the oracle by name).

On the real control plane a case works in a namespace of its own and its nodes carry a label and a taint of
that namespace, which its pods select and tolerate (``_isolated``): the control plane is shared with other
tests, whose leftover pods must not land here, nor these pods on their nodes. The oracle gets the same objects.
The nodes have no kubelet: they are created Ready with their allocatable, and a probe pod per node, bound by
the scheduler, shows each node schedulable (and seen by the scheduler's cache) before the case starts. Pending
pods are created one at a time, each waited for until it is bound or ``PodScheduled=False/Unschedulable``; the
oracle takes them in the same order, then once more those left pending (as the simulation runs it again).

Only what the oracle claims is compared: its filters and NodeResourcesFit's ``LeastAllocated`` score. Cases
that would let another score plugin of the default profile (balanced allocation, taint toleration, affinity,
spread) pick between feasible nodes list every feasible node as an answer.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from simulator.sim.scheduler import Snapshot, Volumes, schedule
from tests import real_kube
from tests.waiting import wait_for

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
CASE_KEY = "oracle.test/case"
RUNTIME_CLASS = "oracle-test-overhead"
OVERHEAD = {"cpu": "500m"}
OTHER_TEAM = {"team": "other"}
_counter = itertools.count()


def _wait(check: Any, *, what: str) -> Any:
    """``wait_for`` polling often: what a case waits for (a binding, a taint removed, a namespace's
    ServiceAccount) takes the control plane milliseconds, and a case waits for it several times."""
    return wait_for(check, what=what, interval=0.02)


# ----- the cases ---------------------------------------------------------------------------------------------
def node(short: str, *, cpu: str = "4", memory: str = "16Gi", pods: str = "110", zone: str = "z1",
         labels: Mapping[str, str] | None = None, taints: Sequence[Obj] = (), unschedulable: bool = False,
         extended: Mapping[str, str] | None = None) -> Obj:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extended or {})}
    return {"metadata": {"name": short, "labels": {ZONE: zone, **(labels or {})}},
            "spec": {"taints": list(taints), **({"unschedulable": True} if unschedulable else {})},
            "status": {"capacity": dict(allocatable), "allocatable": allocatable}}


def pod(name: str, *, cpu: str | None = "1", memory: str | None = "1Gi", labels: Mapping[str, str] | None = None,
        on: str | None = None, ports: Sequence[Obj] = (), limits: Mapping[str, str] | None = None,
        extra: Mapping[str, str] | None = None, phase: str | None = None, **spec: Any) -> Obj:
    """A pause pod (``cpu``/``memory`` None: no request for it); ``on``: bound to that node; ``phase``: the
    status a bound pod's kubelet would have reported."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None} | dict(extra or {})
    resources: Obj = {**({"requests": requests} if requests else {}), **({"limits": dict(limits)} if limits else {})}
    container: Obj = {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": resources}
    if ports:
        container["ports"] = list(ports)
    body: Obj = {"containers": [container], "terminationGracePeriodSeconds": 0, **spec}
    if on:
        body["nodeName"] = on
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "spec": body,
            **({"status": {"phase": phase}} if phase else {})}


def required(kind: str, *terms: Obj) -> Obj:
    """``affinity`` with required pod affinity or anti-affinity terms."""
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def node_affinity(*expressions: Obj, fields: Sequence[Obj] = ()) -> Obj:
    term: Obj = {}
    if expressions:
        term["matchExpressions"] = list(expressions)
    if fields:
        term["matchFields"] = list(fields)
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def spread(app: str, *, key: str = ZONE, skew: int = 1, **extra: Any) -> Obj:
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}}, **extra}


def host_port(port: int, protocol: str = "TCP") -> Obj:
    return {"containerPort": port, "hostPort": port, "protocol": protocol}


@dataclass(frozen=True)
class Claim:
    """A PersistentVolumeClaim bound to a PersistentVolume of its own (zone labels, node affinity)."""

    name: str
    zone_label: str | None = None
    affinity_zone: str | None = None


Expected = str | frozenset[str] | None  # the node, any of these nodes (tied scores), or left pending


@dataclass(frozen=True)
class Case:
    id: str
    nodes: Sequence[Obj]
    pending: Sequence[Obj]
    expect: Mapping[str, Expected]
    bound: Sequence[Obj] = ()
    claims: Sequence[Claim] = ()
    elsewhere: Sequence[Obj] = ()  # bound pods in a second namespace, labelled ``OTHER_TEAM``


def either(*nodes: str) -> frozenset[str]:
    return frozenset(nodes)


UNSCHEDULABLE_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
FRUIT = {"key": "fruit", "value": "banana", "effect": "NoSchedule"}
ZONE_IN_Z2 = {"key": ZONE, "operator": "In", "values": ["z2"]}

CASES: list[Case] = [
    # NodeUnschedulable
    Case("cordoned-node-skipped", [node("a", unschedulable=True), node("b")], [pod("p")], {"p": "b"}),
    Case("cordoned-only-node-pending", [node("a", unschedulable=True)], [pod("p")], {"p": None}),
    Case("cordon-tolerated", [node("a", unschedulable=True)],
         [pod("p", tolerations=[UNSCHEDULABLE_TOLERATION])], {"p": "a"}),
    # NodeResourcesFit
    Case("cpu-fits-larger-node", [node("a", cpu="2"), node("b", cpu="4")], [pod("p", cpu="3")], {"p": "b"}),
    Case("memory-fits-nowhere", [node("a", memory="4Gi"), node("b", memory="8Gi")], [pod("p", memory="9Gi")],
         {"p": None}),
    Case("bound-pods-use-the-room", [node("a", cpu="4")], [pod("p", cpu="2")], {"p": None},
         bound=[pod("x", cpu="3", on="a")]),
    Case("pod-slots-full", [node("a", pods="1"), node("b", pods="2")], [pod("p", cpu="10m")], {"p": "b"},
         bound=[pod("x", cpu="10m", on="a"), pod("y", cpu="10m", on="b")]),
    Case("extended-resource", [node("a", cpu="8"), node("b", extended={"example.com/widget": "2"})],
         [pod("p", extra={"example.com/widget": "1"}, limits={"example.com/widget": "1"})], {"p": "b"}),
    Case("extended-resource-used-up", [node("a", extended={"example.com/widget": "1"})],
         [pod("p", extra={"example.com/widget": "1"}, limits={"example.com/widget": "1"})], {"p": None},
         bound=[pod("x", extra={"example.com/widget": "1"}, limits={"example.com/widget": "1"}, on="a")]),
    Case("init-container-peak", [node("a", cpu="2"), node("b", cpu="4")],
         [pod("p", cpu="1", initContainers=[{"name": "i", "image": "registry.k8s.io/pause:3.10",
                                             "resources": {"requests": {"cpu": "3"}}}])], {"p": "b"}),
    Case("sidecar-adds-to-containers", [node("a", cpu="2"), node("b", cpu="4")],
         [pod("p", cpu="1500m", initContainers=[{"name": "s", "image": "registry.k8s.io/pause:3.10",
                                                 "restartPolicy": "Always",
                                                 "resources": {"requests": {"cpu": "1"}}}])], {"p": "b"}),
    Case("pod-overhead-counted", [node("a", cpu="2"), node("b", cpu="4")],
         [pod("p", cpu="1750m", runtimeClassName=RUNTIME_CLASS, overhead=dict(OVERHEAD))], {"p": "b"}),
    # NodeAffinity
    Case("node-selector", [node("a", labels={"tier": "web"}), node("b", labels={"tier": "db"})],
         [pod("p", nodeSelector={"tier": "db"})], {"p": "b"}),
    Case("node-selector-matches-nothing", [node("a", labels={"tier": "web"})],
         [pod("p", nodeSelector={"tier": "db"})], {"p": None}),
    Case("affinity-in", [node("a"), node("b", zone="z2")], [pod("p", affinity=node_affinity(ZONE_IN_Z2))],
         {"p": "b"}),
    Case("affinity-notin", [node("a"), node("b", zone="z2")],
         [pod("p", affinity=node_affinity({"key": ZONE, "operator": "NotIn", "values": ["z2"]}))], {"p": "a"}),
    Case("affinity-exists-and-gt", [node("a", labels={"size": "4"}), node("b", labels={"size": "16"}), node("c")],
         [pod("p", affinity=node_affinity({"key": "size", "operator": "Exists"},
                                          {"key": "size", "operator": "Gt", "values": ["8"]}))], {"p": "b"}),
    Case("affinity-does-not-exist", [node("a", labels={"gpu": "yes"}), node("b")],
         [pod("p", affinity=node_affinity({"key": "gpu", "operator": "DoesNotExist"}))], {"p": "b"}),
    Case("affinity-match-fields-name", [node("a"), node("b")],
         [pod("p", affinity=node_affinity(fields=[{"key": "metadata.name", "operator": "In", "values": ["b"]}]))],
         {"p": "b"}),
    # TaintToleration
    Case("noschedule-taint", [node("a", taints=[FRUIT]), node("b")], [pod("p")], {"p": "b"}),
    Case("noexecute-taint", [node("a", taints=[{"key": "k", "effect": "NoExecute"}]), node("b")],
         [pod("p")], {"p": "b"}),
    Case("prefer-no-schedule-does-not-filter", [node("a", taints=[{"key": "k", "effect": "PreferNoSchedule"}])],
         [pod("p")], {"p": "a"}),
    Case("equal-toleration", [node("a", taints=[FRUIT])],
         [pod("p", tolerations=[{"key": "fruit", "operator": "Equal", "value": "banana", "effect": "NoSchedule"}])],
         {"p": "a"}),
    Case("equal-toleration-wrong-value", [node("a", taints=[FRUIT])],
         [pod("p", tolerations=[{"key": "fruit", "operator": "Equal", "value": "apple", "effect": "NoSchedule"}])],
         {"p": None}),
    Case("exists-toleration-wrong-effect", [node("a", taints=[FRUIT])],
         [pod("p", tolerations=[{"key": "fruit", "operator": "Exists", "effect": "NoExecute"}])], {"p": None}),
    Case("exists-everything", [node("a", taints=[FRUIT, {"key": "k", "value": "v", "effect": "NoExecute"}])],
         [pod("p", tolerations=[{"operator": "Exists"}])], {"p": "a"}),
    # NodePorts
    Case("host-port-taken", [node("a"), node("b")], [pod("p", cpu="100m", ports=[host_port(8080)])], {"p": "a"},
         bound=[pod("x", cpu="100m", on="b", ports=[host_port(8080)])]),
    Case("host-port-other-protocol", [node("a")], [pod("p", ports=[host_port(8080, "UDP")])], {"p": "a"},
         bound=[pod("x", on="a", ports=[host_port(8080)])]),
    Case("host-port-only-node-taken", [node("a")], [pod("p", ports=[host_port(8080)])], {"p": None},
         bound=[pod("x", on="a", ports=[host_port(8080)])]),
    # VolumeZone and the volume's node affinity
    Case("volume-zone-label", [node("a"), node("b", zone="z2")],
         [pod("p", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}])], {"p": "b"},
         claims=[Claim("data", zone_label="z2")]),
    Case("volume-node-affinity", [node("a"), node("b", zone="z2")],
         [pod("p", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}])], {"p": "b"},
         claims=[Claim("data", affinity_zone="z2")]),
    # PodTopologySpread (DoNotSchedule)
    Case("spread-to-the-empty-zone", [node("a"), node("b", zone="z2")],
         [pod("p", labels={"app": "s"}, topologySpreadConstraints=[spread("s")])], {"p": "b"},
         bound=[pod("x", labels={"app": "s"}, on="a")]),
    Case("spread-max-skew-2", [node("a"), node("b", zone="z2")],
         [pod("p", labels={"app": "s"}, topologySpreadConstraints=[spread("s", skew=2)])], {"p": "b"},
         bound=[pod("x", labels={"app": "s"}, on="a"), pod("y", labels={"app": "s"}, on="a")]),
    Case("spread-three-pods-three-zones", [node("a"), node("b", zone="z2"), node("c", zone="z3")],
         [pod(f"p{i}", labels={"app": "s"}, topologySpreadConstraints=[spread("s")]) for i in range(4)],
         {"p0": either("a", "b", "c"), "p1": either("a", "b", "c"), "p2": either("a", "b", "c"),
          "p3": either("a", "b", "c")}),
    Case("spread-min-domains", [node("a"), node("b")],
         [pod("p", labels={"app": "s"}, topologySpreadConstraints=[spread("s", minDomains=2)])], {"p": None},
         bound=[pod("x", labels={"app": "s"}, on="a")]),
    Case("spread-without-min-domains", [node("a"), node("b")],
         [pod("p", labels={"app": "s"}, topologySpreadConstraints=[spread("s")])], {"p": either("a", "b")},
         bound=[pod("x", labels={"app": "s"}, on="a")]),
    Case("spread-node-without-the-key", [node("a", labels={"rack": "r1"}), node("b")],
         [pod("p", labels={"app": "s"}, topologySpreadConstraints=[spread("s", key="rack")])], {"p": "a"}),
    Case("spread-counts-only-eligible-nodes", [node("a"), node("b", zone="z2", labels={"pool": "x"})],
         [pod("p", labels={"app": "s"}, nodeSelector={"pool": "x"}, topologySpreadConstraints=[spread("s")])],
         {"p": "b"}, bound=[pod("x", labels={"app": "s"}, on="b")]),
    # InterPodAffinity
    Case("affinity-to-existing-pod", [node("a"), node("b")],
         [pod("p", affinity=required("podAffinity", {"topologyKey": HOST,
                                                     "labelSelector": {"matchLabels": {"app": "db"}}}))],
         {"p": "b"}, bound=[pod("x", labels={"app": "db"}, on="b")]),
    Case("affinity-to-nothing-pending", [node("a")],
         [pod("p", affinity=required("podAffinity", {"topologyKey": HOST,
                                                     "labelSelector": {"matchLabels": {"app": "db"}}}))],
         {"p": None}),
    Case("affinity-first-pod-of-its-group", [node("a"), node("b")],
         [pod("p", labels={"app": "g"}, affinity=required("podAffinity", {
             "topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "g"}}}))], {"p": either("a", "b")}),
    Case("affinity-zone-domain", [node("a"), node("b", zone="z2"), node("c", zone="z2")],
         [pod("p", affinity=required("podAffinity", {"topologyKey": ZONE,
                                                     "labelSelector": {"matchLabels": {"app": "db"}}}))],
         {"p": either("b", "c")}, bound=[pod("x", labels={"app": "db"}, on="b")]),
    Case("anti-affinity", [node("a"), node("b")],
         [pod("p", affinity=required("podAntiAffinity", {"topologyKey": HOST,
                                                         "labelSelector": {"matchLabels": {"app": "web"}}}))],
         {"p": "a"}, bound=[pod("x", labels={"app": "web"}, on="b")]),
    Case("anti-affinity-self-two-nodes-three-pods", [node("a"), node("b")],
         [pod(f"p{i}", labels={"app": "solo"}, affinity=required("podAntiAffinity", {
             "topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "solo"}}})) for i in range(3)],
         {"p0": either("a", "b"), "p1": either("a", "b"), "p2": None}),
    Case("existing-pods-anti-affinity", [node("a"), node("b")], [pod("p", labels={"app": "noisy"})], {"p": "a"},
         bound=[pod("x", on="b", affinity=required("podAntiAffinity", {
             "topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "noisy"}}}))]),
    Case("anti-affinity-other-namespace-ignored", [node("a")],
         [pod("p", affinity=required("podAntiAffinity", {"topologyKey": HOST, "namespaces": ["elsewhere"],
                                                         "labelSelector": {"matchLabels": {"app": "web"}}}))],
         {"p": "a"}, bound=[pod("x", labels={"app": "web"}, on="a")]),
    # What the API server's defaulting and the scheduler's accounting add to a pod's own numbers
    Case("limits-are-the-requests", [node("a", cpu="2"), node("b", cpu="4")],
         [pod("p", cpu=None, memory=None, limits={"cpu": "3", "memory": "1Gi"})], {"p": "b"}),
    Case("pod-level-requests", [node("a", cpu="2"), node("b", cpu="4")],
         [pod("p", cpu=None, memory=None, resources={"requests": {"cpu": "3", "memory": "1Gi"}})], {"p": "b"}),
    Case("finished-pod-frees-its-room", [node("a", cpu="4")], [pod("p", cpu="3")], {"p": "a"},
         bound=[pod("x", cpu="3", on="a", phase="Succeeded")]),
    Case("best-effort-pods-count-in-the-score", [node("a"), node("b")], [pod("p", cpu=None, memory=None)],
         {"p": "b"}, bound=[pod("x", cpu=None, memory=None, on="a")]),
    Case("missing-memory-request-counts-in-the-score", [node("a", memory="2Gi"), node("b", memory="2Gi")],
         [pod("p", cpu="100m", memory=None)], {"p": "b"},
         bound=[pod("x", cpu="200m", memory=None, on="a"), pod("y", cpu="300m", memory="10Mi", on="b")]),
    # More of TaintToleration, NodePorts, PodTopologySpread and InterPodAffinity
    Case("toleration-without-effect", [node("a", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}])],
         [pod("p", tolerations=[{"key": "k", "operator": "Exists"}])], {"p": "a"}),
    Case("host-port-other-host-ip", [node("a")],
         [pod("p", cpu="100m", ports=[{**host_port(8080), "hostIP": "10.0.0.2"}])], {"p": "a"},
         bound=[pod("x", cpu="100m", on="a", ports=[{**host_port(8080), "hostIP": "10.0.0.1"}])]),
    Case("host-port-any-ip-conflicts", [node("a")], [pod("p", cpu="100m", ports=[host_port(8080)])], {"p": None},
         bound=[pod("x", cpu="100m", on="a", ports=[{**host_port(8080), "hostIP": "10.0.0.1"}])]),
    Case("spread-match-label-keys", [node("a"), node("b", zone="z2")],
         [pod("p", labels={"app": "s", "version": "2"},
              topologySpreadConstraints=[spread("s", matchLabelKeys=["version"])])], {"p": either("a", "b")},
         bound=[pod("x", labels={"app": "s", "version": "1"}, on="a")]),
    Case("spread-pod-outside-its-selector", [node("a"), node("b", zone="z2")],
         [pod("p", labels={"app": "other"}, topologySpreadConstraints=[spread("s")])], {"p": either("a", "b")},
         bound=[pod("x", labels={"app": "s"}, on="a")]),
    Case("spread-taints-ignored-by-default", [node("a"), node("b", zone="z2", taints=[FRUIT])],
         [pod("p", labels={"app": "s"}, topologySpreadConstraints=[spread("s")])], {"p": None},
         bound=[pod("x", labels={"app": "s"}, on="a")]),
    Case("spread-taints-honored", [node("a"), node("b", zone="z2", taints=[FRUIT])],
         [pod("p", labels={"app": "s"}, topologySpreadConstraints=[spread("s", nodeTaintsPolicy="Honor")])],
         {"p": "a"}, bound=[pod("x", labels={"app": "s"}, on="a")]),
    Case("affinity-group-already-elsewhere", [node("a"), node("b")],
         [pod("p", labels={"app": "g"}, affinity=required("podAffinity", {
             "topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "g"}}}))], {"p": "b"},
         bound=[pod("x", labels={"app": "g"}, on="b")]),
    Case("anti-affinity-node-without-the-key", [node("a", labels={"rack": "r1"}), node("b")],
         [pod("p", affinity=required("podAntiAffinity", {"topologyKey": "rack",
                                                         "labelSelector": {"matchLabels": {"app": "web"}}}))],
         {"p": "b"}, bound=[pod("x", labels={"app": "web"}, on="a")]),
    Case("existing-anti-affinity-zone", [node("a"), node("b"), node("c", zone="z2")],
         [pod("p", labels={"app": "noisy"})], {"p": "c"},
         bound=[pod("x", on="a", affinity=required("podAntiAffinity", {
             "topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "noisy"}}}))]),
    Case("empty-selector-anti-affinity-repels-all", [node("a"), node("b")], [pod("p")], {"p": "a"},
         bound=[pod("x", on="b", affinity=required("podAntiAffinity", {"topologyKey": HOST, "labelSelector": {}}))]),
    # Affinity terms' namespaces
    Case("anti-affinity-namespace-selector", [node("a"), node("b")],
         [pod("p", affinity=required("podAntiAffinity", {"topologyKey": HOST, "namespaceSelector": {
             "matchLabels": OTHER_TEAM}, "labelSelector": {"matchLabels": {"app": "web"}}}))], {"p": "b"},
         bound=[pod("filler", cpu="2", on="b")],
         elsewhere=[pod("x", cpu="100m", labels={"app": "web"}, on="a")]),
    Case("affinity-namespace-selector-leaves-out-its-own-namespace", [node("a")],
         [pod("p", affinity=required("podAffinity", {"topologyKey": HOST, "namespaceSelector": {
             "matchLabels": OTHER_TEAM}, "labelSelector": {"matchLabels": {"app": "db"}}}))], {"p": None},
         bound=[pod("x", labels={"app": "db"}, on="a")]),
    Case("affinity-namespaces-and-selector-together", [node("a"), node("b")],
         [pod("p", affinity=required("podAffinity", {"topologyKey": HOST, "namespaces": ["nowhere"],
                                                     "namespaceSelector": {"matchLabels": OTHER_TEAM},
                                                     "labelSelector": {"matchLabels": {"app": "db"}}}))],
         {"p": "b"}, elsewhere=[pod("x", labels={"app": "db"}, on="b")]),
    Case("empty-namespace-selector-every-namespace", [node("a"), node("b")],
         [pod("p", affinity=required("podAntiAffinity", {"topologyKey": HOST, "namespaceSelector": {},
                                                         "labelSelector": {"matchLabels": {"app": "web"}}}))],
         {"p": "b"},
         bound=[pod("filler", cpu="2", on="b")],
         elsewhere=[pod("x", cpu="100m", labels={"app": "web"}, on="a")]),
    # NodeResourcesFit's score: LeastAllocated picks the emptier node
    Case("least-allocated", [node("a"), node("b")], [pod("p", cpu="1", memory="4Gi")], {"p": "b"},
         bound=[pod("x", cpu="2", memory="8Gi", on="a")]),
    Case("least-allocated-fills-evenly", [node("a"), node("b")],
         [pod(f"p{i}", cpu="1", memory="4Gi") for i in range(2)], {"p0": either("a", "b"), "p1": either("a", "b")}),
]


# ----- one case as concrete objects ------------------------------------------------------------------------------
@dataclass
class Objects:
    """A case's objects for one run: names made unique by the case's namespace, with the isolation label, taint
    and toleration."""

    namespace: str
    nodes: list[Obj]
    bound: list[Obj]  # in both namespaces
    pending: list[Obj]
    claims: list[Obj]
    volumes: list[Obj]
    namespaces: list[Obj]  # the case's own, then the second one if the case has pods there (``Case.elsewhere``)

    def short(self, node_name: str | None) -> str | None:
        return None if node_name is None else node_name.removeprefix(f"{self.namespace}-")


def _isolated(case: Case, namespace: str) -> Objects:
    def node_name(short: str) -> str:
        return f"{namespace}-{short}"

    isolation_taint = {"key": CASE_KEY, "value": namespace, "effect": "NoSchedule"}
    nodes = []
    for template in case.nodes:
        obj = copy.deepcopy(template)
        name = node_name(obj["metadata"]["name"])
        obj["metadata"]["name"] = name
        obj["metadata"]["labels"].update({HOST: name, CASE_KEY: namespace})
        obj["spec"]["taints"].append(isolation_taint)
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                        "message": "kubelet is posting ready status"}]
        nodes.append(obj)

    def prepared(template: Obj, where: str = namespace) -> Obj:
        obj = copy.deepcopy(template)
        obj["metadata"]["namespace"] = where
        spec = obj["spec"]
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), CASE_KEY: namespace}
        spec["tolerations"] = [*(spec.get("tolerations") or ()),
                               {"key": CASE_KEY, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}]
        if spec.get("nodeName"):
            spec["nodeName"] = node_name(spec["nodeName"])
        for term in ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
                      .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or ()):
            for match in term.get("matchFields") or ():
                match["values"] = [node_name(v) for v in match["values"]]
        return obj

    claims, volumes = [], []
    for claim in case.claims:
        pv_name = f"{namespace}-{claim.name}"
        pv: Obj = {"metadata": {"name": pv_name, "labels": {ZONE: claim.zone_label} if claim.zone_label else {}},
                   "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "", "hostPath": {"path": f"/tmp/{pv_name}"},
                            "claimRef": {"namespace": namespace, "name": claim.name}}}
        if claim.affinity_zone:
            pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": ZONE, "operator": "In", "values": [claim.affinity_zone]}]}]}}
        volumes.append(pv)
        claims.append({"metadata": {"name": claim.name, "namespace": namespace},
                       "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv_name,
                                "resources": {"requests": {"storage": "1Gi"}}}})
    other = f"{namespace}-x"
    bound = [prepared(p) for p in case.bound] + [prepared(p, other) for p in case.elsewhere]
    namespaces = [{"metadata": {"name": namespace}}]
    if case.elsewhere:
        namespaces.append({"metadata": {"name": other, "labels": dict(OTHER_TEAM)}})
    return Objects(namespace, nodes, bound, [prepared(p) for p in case.pending], claims, volumes, namespaces)


# ----- the two schedulers ----------------------------------------------------------------------------------------
def run_oracle(objects: Objects) -> dict[str, str | None]:
    """The oracle on the case's objects: the pending pods one at a time in creation order, then once more those
    left pending (the simulation runs the oracle again on every tick)."""
    bound = [{**p, "status": p.get("status") or {"phase": "Running"}} for p in objects.bound]
    snapshot = Snapshot(objects.nodes, bound, Volumes.of(objects.claims, objects.volumes), objects.namespaces)
    placed: dict[str, str | None] = {}
    pending = [{**p, "status": {"phase": "Pending"}} for p in objects.pending]
    for each in pending:
        [decision] = schedule([each], snapshot)
        placed[each["metadata"]["name"]] = objects.short(decision.node)
    for decision in schedule([p for p in pending if placed[p["metadata"]["name"]] is None], snapshot):
        placed[decision.pod.split("/", 1)[1]] = objects.short(decision.node)
    return placed


def _decided(plane: real_kube.ControlPlane, namespace: str, name: str) -> Obj | None:
    """The pod once kube-scheduler decided: bound, or ``PodScheduled=False`` with reason Unschedulable."""
    current: Obj = plane.must("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    if current["spec"].get("nodeName"):
        return current
    unschedulable = any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                        and c.get("reason") == "Unschedulable" for c in current["status"].get("conditions") or ())
    return current if unschedulable else None


def _bound(plane: real_kube.ControlPlane, namespace: str, name: str) -> Obj | None:
    """The pod once bound to a node."""
    current: Obj = plane.must("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return current if current["spec"].get("nodeName") else None


def _runtime_class(plane: real_kube.ControlPlane) -> None:
    """The RuntimeClass whose admission sets a pod's overhead (a pod may not set one by itself)."""
    if plane.request("GET", f"/apis/node.k8s.io/v1/runtimeclasses/{RUNTIME_CLASS}")[0] == 404:
        plane.must("POST", "/apis/node.k8s.io/v1/runtimeclasses", {
            "metadata": {"name": RUNTIME_CLASS}, "handler": "runc", "overhead": {"podFixed": dict(OVERHEAD)}})


def run_real(plane: real_kube.ControlPlane, objects: Objects) -> dict[str, str | None]:
    ns = objects.namespace
    for namespace in objects.namespaces:
        plane.must("POST", "/api/v1/namespaces", namespace)
    try:
        for namespace in objects.namespaces:
            name = namespace["metadata"]["name"]
            _wait(lambda name=name: plane.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0]
                     == 200, what=f"the default ServiceAccount of {name}")
        _runtime_class(plane)
        for obj in objects.nodes:
            plane.must("POST", "/api/v1/nodes", obj)
        for obj in objects.volumes:
            plane.must("POST", "/api/v1/persistentvolumes", obj)
        for obj in objects.claims:
            plane.must("POST", f"/api/v1/namespaces/{ns}/persistentvolumeclaims", obj)
        claims = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
        _wait(lambda: all(c["status"].get("phase") == "Bound" for c in plane.must("GET", claims)["items"]),
                 what="the claims bound to their volumes")
        _nodes_schedulable(plane, objects)
        for obj in objects.bound:
            path = f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods"
            plane.must("POST", path, {k: v for k, v in obj.items() if k != "status"})
            if obj.get("status"):
                plane.must("PATCH", f"{path}/{obj['metadata']['name']}/status",
                           {"status": obj["status"]}, content_type="application/merge-patch+json")
        placed: dict[str, str | None] = {}
        for obj in objects.pending:
            name = obj["metadata"]["name"]
            plane.must("POST", f"/api/v1/namespaces/{ns}/pods", obj)
            _wait(lambda name=name: _decided(plane, ns, name), what=f"kube-scheduler's decision on {ns}/{name}")
        for obj in objects.pending:
            name = obj["metadata"]["name"]
            decided = _wait(lambda name=name: _decided(plane, ns, name), what=f"{ns}/{name} decided")
            placed[name] = objects.short(decided["spec"].get("nodeName"))
        return placed
    finally:
        # Bound pods on a node without a kubelet would stay terminating: deleted at once.
        for namespace in objects.namespaces:
            plane.request("DELETE", f"/api/v1/namespaces/{namespace['metadata']['name']}/pods",
                          {"gracePeriodSeconds": 0})
        for obj in objects.nodes:
            plane.request("DELETE", f"/api/v1/nodes/{obj['metadata']['name']}")
        for obj in objects.volumes:
            plane.request("DELETE", f"/api/v1/persistentvolumes/{obj['metadata']['name']}")
        for namespace in objects.namespaces:
            plane.request("DELETE", f"/api/v1/namespaces/{namespace['metadata']['name']}")


def _nodes_schedulable(plane: real_kube.ControlPlane, objects: Objects) -> None:
    """Every node of the case is schedulable without a kubelet, and kube-scheduler's cache has it: the
    controller manager drops the ``not-ready`` taint admission put on the new node (it is created Ready), and a
    probe pod pinned to the node gets bound there. The probes are deleted before the case starts."""
    ns = objects.namespace
    for obj in objects.nodes:
        name = obj["metadata"]["name"]
        _wait(lambda name=name: not any(t["key"] == "node.kubernetes.io/not-ready" for t in plane.must(
            "GET", f"/api/v1/nodes/{name}")["spec"].get("taints") or ()), what=f"{name} without the not-ready taint")
    probes = []
    for index, obj in enumerate(objects.nodes):
        name = obj["metadata"]["name"]
        probe = f"probe-{index}"
        plane.must("POST", f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": probe}, "spec": {
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "nodeSelector": {HOST: name}, "tolerations": [{"operator": "Exists"}]}})
        probes.append((probe, name))
    # Waited for until bound, not merely decided: a probe created before kube-scheduler's cache has its node
    # is first found unschedulable ("no nodes available"), then retried when the node's add event arrives.
    for probe, name in probes:
        bound = _wait(lambda probe=probe: _bound(plane, ns, probe),
                      what=f"the probe pod bound on {name} (the node schedulable)")
        assert bound["spec"].get("nodeName") == name, f"{name} is not schedulable: {bound['status']}"
    for probe, _ in probes:
        plane.must("DELETE", f"/api/v1/namespaces/{ns}/pods/{probe}", {"gracePeriodSeconds": 0})
    _wait(lambda: not plane.must("GET", f"/api/v1/namespaces/{ns}/pods")["items"],
             what="the probe pods gone")


@pytest.fixture(scope="module")
def plane() -> real_kube.ControlPlane:
    return real_kube.control_plane()


@pytest.fixture
def scheduler(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.parametrize("scheduler", [pytest.param("real", marks=pytest.mark.real_kube), "oracle"], indirect=True)
def test_placement(scheduler: str, case: Case, request: pytest.FixtureRequest) -> None:
    namespace = f"oracle-{next(_counter)}-{int(time.time() * 1000) % 10**7}"
    objects = _isolated(case, namespace)
    placed = run_real(request.getfixturevalue("plane"), objects) if scheduler == "real" else run_oracle(objects)
    assert set(placed) == set(case.expect)
    wrong = {name: node_name for name, node_name in placed.items() if not _agrees(case.expect[name], node_name)}
    assert not wrong, f"{scheduler}: placed {placed}, expected {dict(case.expect)}"


def _agrees(expected: Expected, actual: str | None) -> bool:
    if isinstance(expected, frozenset):
        return actual in expected
    return actual == expected


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


