"""Harness for Karpenter's scheduling tests ported as tables: a small cluster that provisions in steps
(each plan's launches become real nodes with the pods bound, as Karpenter's ``ExpectProvisioned`` does),
pod and NodePool builders in Karpenter's vocabulary, and its assertions (``ExpectSkew`` and friends).

Karpenter's fake zones ``test-zone-1..3`` are our ``us-east-1a..c``; its instance types are the test
catalogue's (tests/domain/scheduling_world.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.domain.allocatable import allocatable
from autoscaler.domain.labels import instance_type_labels
from autoscaler.domain.models import (
    DaemonSet,
    HostPort,
    LabelSelector,
    Node,
    NodeSelectorTerm,
    OwnerRef,
    Pod,
    PodAffinityTerm,
    Requirement,
    Toleration,
    TopologySpreadConstraint,
)
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import Plan, PlanInput
from autoscaler.domain.scheduling import plan
from tests.domain.scheduling_world import GI, MI, NODE_CLASS, TYPES, offerings
from tests.domain.scheduling_world import pool as make_pool

ZONE, HOST, CT, ARCH = (
    "topology.kubernetes.io/zone",
    "kubernetes.io/hostname",
    "karpenter.sh/capacity-type",
    "kubernetes.io/arch",
)
IT = "node.kubernetes.io/instance-type"
Z1, Z2, Z3 = "us-east-1a", "us-east-1b", "us-east-1c"
LABELS = {"test": "test"}
SEL = LabelSelector(match_labels=(("test", "test"),))
_TYPES = {t.name: t for t in TYPES}


def req(key: str, op: str, *values: str, min_values: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op, "values": list(values)}
    if min_values is not None:
        out["minValues"] = min_values
    return out


def nodepool(name: str = "default", *reqs: dict[str, Any], **kw: Any) -> NodePool:
    """Karpenter's topology-suite NodePool: any capacity type unless the requirements say otherwise."""
    requirements = list(reqs)
    if not any(r["key"] == CT for r in requirements):
        requirements.append(req(CT, "In", "spot", "on-demand"))
    return make_pool(name, requirements=requirements, **kw)


def _term(r: Sequence[Requirement | tuple[str, str, Sequence[str]]]) -> NodeSelectorTerm:
    return NodeSelectorTerm(
        tuple(
            x if isinstance(x, Requirement) else Requirement(x[0], x[1], tuple(x[2]))  # type: ignore[arg-type]
            for x in r
        )
    )


def spread(
    key: str, skew: int = 1, when: str = "DoNotSchedule", sel: LabelSelector | None = SEL, **kw: Any
) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(skew, key, when, sel, **kw)  # type: ignore[arg-type]


def term(key: str, sel: LabelSelector | None = SEL, namespaces: tuple[str, ...] = ()) -> PodAffinityTerm:
    return PodAffinityTerm(sel, key, namespaces)


_COUNTER = [0]


def kpod(
    name: str = "",
    *,
    labels: dict[str, str] | None = None,
    cpu: int = 100,
    memory: int = 128 * MI,
    ns: str = "default",
    node_selector: dict[str, str] | None = None,
    reqs: Sequence[tuple[str, str, Sequence[str]]] = (),
    terms: Sequence[Sequence[tuple[str, str, Sequence[str]]]] = (),
    prefs: Sequence[tuple[int, Sequence[tuple[str, str, Sequence[str]]]]] = (),
    spreads: Sequence[TopologySpreadConstraint] = (),
    aff: Sequence[PodAffinityTerm] = (),
    anti: Sequence[PodAffinityTerm] = (),
    pref_aff: Sequence[tuple[int, PodAffinityTerm]] = (),
    pref_anti: Sequence[tuple[int, PodAffinityTerm]] = (),
    tolerations: Sequence[Toleration] = (),
    ports: Sequence[int] = (),
    extra: dict[str, int] | None = None,
    node_name: str | None = None,
    phase: str = "Pending",
    deleting: bool = False,
    owner: str | None = None,
) -> Pod:
    """A pod in Karpenter's ``test.UnschedulablePod`` style (small requests unless given)."""
    _COUNTER[0] += 1
    required = tuple(_term(t) for t in terms) or ((_term(reqs),) if reqs else ())
    return Pod(
        namespace=ns,
        name=name or f"pod-{_COUNTER[0]}",
        labels=dict(labels or {}),
        node_name=node_name,
        phase=phase,
        deleting=deleting,
        requests={"cpu": cpu, "memory": memory, "pods": 1, **(extra or {})},
        node_selector=dict(node_selector or {}),
        required_node_affinity=required,
        preferred_node_affinity=tuple((w, _term(t)) for w, t in prefs),
        tolerations=tuple(tolerations),
        topology_spread=tuple(spreads),
        pod_affinity=tuple(aff),
        pod_anti_affinity=tuple(anti),
        preferred_pod_affinity=tuple(pref_aff),
        preferred_pod_anti_affinity=tuple(pref_anti),
        host_ports=tuple(HostPort(p) for p in ports),
        owner=OwnerRef("ReplicaSet", owner or name or "rs", controller=True),
    )


def kpods(n: int, **kw: Any) -> list[Pod]:
    return [kpod(**kw) for _ in range(n)]


def node(
    name: str,
    labels: dict[str, str],
    *,
    cpu: int = 16000,
    memory: int = 64 * GI,
    pods: int = 110,
    taints: Sequence[Any] = (),
) -> Node:
    """A node that already exists (not launched by this harness), like Karpenter's ``test.Node``."""
    return Node(
        name,
        labels={HOST: name, **labels},
        allocatable={"cpu": cpu, "memory": memory, "pods": pods},
        capacity={"cpu": cpu, "memory": memory, "pods": pods},
        taints=tuple(taints),
        ready=True,
    )


@dataclass
class Cluster:
    """Nodes and pods after each provisioning step; launches become nodes with their pods bound."""

    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    daemonsets: list[DaemonSet] = field(default_factory=list)
    last: Plan | None = None
    launched: int = 0
    unschedulable: dict[str, str] = field(default_factory=dict)  # pod name -> reason (last step)

    def provision(self, pools: Sequence[NodePool], pods: Sequence[Pod], **kw: Any) -> Plan:
        """Karpenter's ``ExpectProvisioned``: plan, create a node per launch (its cheapest type, first zone)
        and bind every placed pod."""
        self.pods.extend(pods)
        snap = PlanInput(
            node_pools=list(pools),
            node_classes={"default": NODE_CLASS},
            pods=list(self.pods),
            nodes=list(self.nodes),
            instance_types=list(TYPES),
            offerings=kw.pop("offers", None) or offerings(),
            daemonsets=list(self.daemonsets),
            **kw,
        )
        result = plan(snap)
        binding = dict(result.existing)
        for ln in result.launches:
            self.launched += 1
            name = f"new-{self.launched}"
            it = _TYPES[ln.instance_types[0]]
            labels = {**instance_type_labels(it), **ln.labels, ZONE: ln.zones[0], CT: ln.capacity_type, HOST: name}
            alloc = allocatable(it)
            self.nodes.append(
                Node(name, labels=labels, allocatable=alloc, capacity=alloc, taints=ln.taints, ready=True)
            )
            binding.update(dict.fromkeys(ln.pods, name))
        self.pods = [
            replace(p, node_name=binding[p.key], phase="Running") if p.key in binding else p for p in self.pods
        ]
        self.unschedulable = {u.pod.split("/", 1)[1]: u.reason for u in result.unschedulable}
        self.last = result
        return result

    def node_of(self, name: str) -> Node | None:
        p = next(p for p in self.pods if p.name == name)
        return next((n for n in self.nodes if n.name == p.node_name), None)

    def scheduled(self, name: str) -> bool:
        return self.node_of(name) is not None

    def skew(self, key: str, sel: LabelSelector | None = SEL, ns: str = "default") -> list[int]:
        """Karpenter's ``ExpectSkew``: matching running pods per value of ``key`` on their nodes, sorted."""
        nodes = {n.name: n for n in self.nodes}
        counts: dict[str, int] = {}
        for p in self.pods:
            n = nodes.get(p.node_name or "")
            if (
                n is None
                or p.namespace != ns
                or p.phase in ("Failed", "Succeeded")
                or p.deleting
                or (sel is not None and not sel.matches(p.labels))
            ):
                continue
            value = n.labels.get(key)
            if value is not None:
                counts[value] = counts.get(value, 0) + 1
        return sorted(counts.values())


@dataclass(frozen=True)
class Case:
    """One Karpenter test: ``karpenter`` is its Describe/Context/It path; ``run`` builds and provisions
    the cluster and asserts what Karpenter asserts; ``difference`` names the section of
    docs/differences-from-karpenter.md when we deliberately do otherwise (then ``run`` asserts ours)."""

    karpenter: str
    run: Callable[[Cluster], None]
    difference: str | None = None

    def __str__(self) -> str:
        return self.karpenter


def case_id(c: Case) -> str:
    return c.karpenter


def registrar(cases: list[Case], prefix: str) -> Callable[..., Callable[[Callable[[Cluster], None]],
                                                                        Callable[[Cluster], None]]]:
    """``@karpenter("Describe/It", difference=...)``: records the decorated case under ``prefix``."""

    def karpenter(path: str, difference: str | None = None) -> Callable[[Callable[[Cluster], None]],
                                                                         Callable[[Cluster], None]]:
        def add(fn: Callable[[Cluster], None]) -> Callable[[Cluster], None]:
            cases.append(Case(f"{prefix}/{path}", fn, difference))
            return fn

        return add

    return karpenter


def toleration(key: str = "", value: str = "", effect: str = "", op: str = "Equal") -> Toleration:
    return Toleration(key=key, operator=op, value=value, effect=effect)  # type: ignore[arg-type]
