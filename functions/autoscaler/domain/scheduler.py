"""The scheduling core: which pending pods go on existing capacity, which new nodes to launch, and why
the rest cannot be placed.

It works on equivalence classes, not pods: pods with the same requests, labels and constraints (the
replicas of one Deployment) are one class and are placed by arithmetic ("a node of type T fits k of
them"). The steps, in order:

1. Per NodePool, once: instance types allowed by its requirements, their offerings (minus the
   ``unavailable`` ones) and allocatable less the DaemonSet overhead that would land on such a node.
2. Per class: the first variant of its node requirements (preferred affinity taken as required, then
   relaxed; each required term in turn) that some NodePool or existing node satisfies; its zone and
   capacity-type spread decided as counts per domain (water-filling over existing counts).
3. In-flight instances take back the pods they were launched for; then existing nodes and in-flight
   instances are filled, then nodes already opened by this plan.
4. Classes that shape nodes (hostname anti-affinity, host ports, hostname spread, hostname affinity)
   open their nodes at once, each typed by its price plus the shadow cost of the share of other pods
   it cannot hold; the flexible classes fill those nodes balancing CPU and memory, and the rest is
   packed per (NodePool, requirements, zones, capacity types)
   group: a small LP over at most two instance types sizes the nodes, and each node takes a
   proportional share of every class, so node shapes follow the group's CPU:memory mix. The last
   fraction of a node goes on the type with the lowest price per unit of pods it actually takes, so
   a group's remainder fills small nodes well instead of one roomy node.
5. Each new node gets up to 60 instance types, cheapest first, that fit everything on it.

Preferred pod affinity and anti-affinity are taken as required; ``plan`` relaxes them, one term at a
time, for the pods a plan cannot place, and plans again.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from autoscaler.domain import resources as res
from autoscaler.domain.allocatable import GI, allocatable, capacity
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, NODEPOOL_LABEL, WELL_KNOWN_KEYS, ZONE_LABEL
from autoscaler.domain.labels import instance_type_labels
from autoscaler.domain.models import (
    LabelSelector,
    Node,
    Pod,
    PodAffinityTerm,
    Requirement,
    Taint,
    TopologySpreadConstraint,
    tolerates_all,
)
from autoscaler.domain.nodeclass import KubeletConfiguration, NodeClass
from autoscaler.domain.nodepool import NodePool, requirement_allows
from autoscaler.domain.plan import Launch, Plan, PlanInput, Unschedulable

MAX_INSTANCE_TYPES = 60
RESIDUAL_TIE = 0.005  # price-per-value margin within which the residual node that holds more wins
ZONE_KEYS = frozenset({ZONE_LABEL, "failure-domain.beta.kubernetes.io/zone", "topology.ebs.csi.aws.com/zone"})
_CT = (CAPACITY_TYPE_LABEL,)
_INF = float("inf")

Vec = tuple[int, ...]


# --- vector arithmetic on the plan's resource keys ----------------------------------------------------

def _fit(free: Sequence[int], req: Sequence[int]) -> int:
    """How many requests of ``req`` fit in ``free``."""
    k = 1 << 30
    for f, r in zip(free, req, strict=True):
        if r > 0:
            q = f // r
            k = min(k, q)
    return max(k, 0)


def _add(a: Sequence[int], b: Sequence[int], times: int = 1) -> Vec:
    return tuple(x + y * times for x, y in zip(a, b, strict=True))


def _le(a: Sequence[int], b: Sequence[int]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True))


# --- per NodePool preparation -------------------------------------------------------------------------

@dataclass(eq=False, slots=True)
class _Type:
    name: str
    labels: dict[str, str]
    alloc: Vec  # allocatable minus DaemonSet overhead on this NodePool
    capacity: dict[str, int]
    offerings: dict[tuple[str, str], float]  # (zone, capacity type) -> price


@dataclass(eq=False, slots=True)
class _Pool:
    pool: NodePool
    node_class: str
    types: list[_Type]
    zones: frozenset[str]
    cts: frozenset[str]
    custom: dict[str, list[Requirement]]  # requirements on keys that are not well-known
    usage: dict[str, int]
    index: int


@dataclass(eq=False, slots=True)
class _Target:
    """A class variant on one NodePool: what a new node for it may be."""

    pool: _Pool
    types: list[_Type]
    zones: frozenset[str]
    cts: frozenset[str]
    labels: dict[str, str]
    sig: tuple[object, ...]
    names: frozenset[str] | None = None


def _price(t: _Type, zones: Iterable[str], ct: str) -> float:
    best = _INF
    for z in zones:
        p = t.offerings.get((z, ct))
        if p is not None and p < best:
            best = p
    return best


def _sizing_price(t: _Type, zones: frozenset[str], cts: frozenset[str]) -> float:
    """Price used to size nodes: spot when allowed and offered, else on-demand (what launch will pick)."""
    if "spot" in cts:
        p = _price(t, zones, "spot")
        if p < _INF:
            return p
    return _price(t, zones, "on-demand") if "on-demand" in cts else _INF


# --- pod classes ------------------------------------------------------------------------------------

@dataclass(eq=False, slots=True)
class _Class:
    id: int
    rep: Pod
    pods: list[Pod]
    req: Vec
    variants: list[tuple[Requirement, ...]]
    zone_pin: frozenset[str] | None = None
    error: str | None = None
    # decided during planning
    targets: list[_Target] = field(default_factory=list)
    variant: tuple[Requirement, ...] = ()
    cap: int = 1 << 30  # pods of this class per node
    conflicts: set[int] = field(default_factory=set)
    # hostname spread: (maxSkew, ids of the classes its selector matches, the constraint)
    host_spread: list[tuple[int, frozenset[int], TopologySpreadConstraint]] = field(default_factory=list)
    placed: int = 0
    zone_counts: dict[str, int] = field(default_factory=dict)

    @property
    def size(self) -> tuple[int, ...]:
        return self.req


def _class_key(p: Pod) -> tuple[object, ...]:
    return (
        p.namespace, tuple(sorted(p.labels.items())), tuple(sorted(p.requests.items())),
        tuple(sorted(p.node_selector.items())), p.required_node_affinity, p.preferred_node_affinity,
        p.tolerations, p.topology_spread, p.pod_affinity, p.pod_anti_affinity, p.host_ports, p.volume_claims,
    )


def _variants(p: Pod) -> list[tuple[Requirement, ...]]:
    """Requirement sets to try in order: preferences as required first, relaxed lowest weight first,
    for each required term in turn (Karpenter's order)."""
    base = tuple(Requirement(k, "In", (v,)) for k, v in sorted(p.node_selector.items()))
    terms = [t.requirements for t in p.required_node_affinity] or [()]
    prefs = [t.requirements for _, t in sorted(p.preferred_node_affinity, key=lambda wt: -wt[0])]
    out: list[tuple[Requirement, ...]] = []
    for term in terms:
        for n in range(len(prefs), -1, -1):
            extra = tuple(r for pref in prefs[:n] for r in pref)
            out.append(base + term + extra)
    return out


def _selects(term: PodAffinityTerm | LabelSelector | None, *, owner_ns: str, pod: Pod | _Class,
             namespaces: tuple[str, ...] = ()) -> bool:
    ns = pod.namespace if isinstance(pod, Pod) else pod.rep.namespace
    labels = pod.labels if isinstance(pod, Pod) else pod.rep.labels
    if isinstance(term, PodAffinityTerm):
        namespaces, term = term.namespaces, term.label_selector
    if ns not in (namespaces or (owner_ns,)):
        return False
    return term is not None and term.matches(labels)


@dataclass(eq=False, slots=True)
class _Chunk:
    """Pods of one class still to place, limited to some zones and capacity types."""

    cls: _Class
    zones: frozenset[str] | None
    cts: frozenset[str] | None
    left: int


# --- placement state --------------------------------------------------------------------------------

@dataclass(eq=False, slots=True)
class _Node:
    name: str  # node name or instance id; "" for a new node
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    limit: Vec
    used: Vec
    zones: frozenset[str]
    cts: frozenset[str]
    bound: list[Pod] = field(default_factory=list)
    classes: dict[int, int] = field(default_factory=dict)
    target: _Target | None = None
    type_: _Type | None = None
    reserved: dict[str, int] = field(default_factory=dict)
    free: Vec = ()
    launched_for: tuple[str, ...] = ()  # an in-flight instance's pods
    pinned: dict[int, list[str]] = field(default_factory=dict)  # class id -> pod keys placed by name

    def __post_init__(self) -> None:
        self.free = _sub(self.limit, self.used)
    allowed: frozenset[str] | None = None  # instance types every class on the node allows


class _Scheduler:
    def __init__(self, snap: PlanInput, unavailable: Collection[tuple[str, str, str]]) -> None:
        self.snap = snap
        self.unavailable = set(unavailable)
        self.plan = Plan()
        pending = [p for p in snap.pods if p.is_pending and not p.is_daemonset_pod]
        self.plan.pending_pods = len(pending)
        keys = [res.CPU, res.MEMORY, res.PODS]
        for p in pending:
            for k, v in p.requests.items():
                if v > 0 and k not in keys:
                    keys.append(k)
        self.keys = keys
        self.classes = self._classes(pending)
        self.pools = self._pools()
        self.existing = self._existing_nodes()
        self.open: list[_Node] = []  # new nodes that may still take pods
        self.new_nodes: list[_Node] = []  # every new node, for the output
        self.late: list[tuple[_Class, int, str]] = []
        self.share_cache: dict[int, tuple[Vec, tuple[float, ...]]] = {}
        self.target_cache: dict[tuple[object, ...], _Target | str] = {}
        self.fits_cache: dict[tuple[object, ...], list[_Type]] = {}
        self.sorted_cache: dict[tuple[object, ...], list[tuple[float, str, _Type]]] = {}
        self.frontier_cache: dict[tuple[object, ...], list[tuple[float, _Type]]] = {}
        self.deferred: dict[tuple[object, ...], tuple[_Target, frozenset[str], frozenset[str], list[list[object]]]] = {}

    # ---- preparation ----

    def vec(self, r: Mapping[str, int]) -> Vec:
        return tuple(r.get(k, 0) for k in self.keys)

    def _classes(self, pending: list[Pod]) -> list[_Class]:
        groups: dict[tuple[object, ...], list[Pod]] = {}
        for p in pending:
            groups.setdefault(_class_key(p), []).append(p)
        pvcs = {(c.namespace, c.name): c for c in self.snap.pvcs}
        pvs = {v.name: v for v in self.snap.pvs}
        scs = {s.name: s for s in self.snap.storage_classes}
        out = []
        for i, pods in enumerate(groups.values()):
            rep = pods[0]
            c = _Class(id=i, rep=rep, pods=pods, req=self.vec(rep.requests), variants=_variants(rep))
            for claim in rep.volume_claims:
                pvc = pvcs.get((rep.namespace, claim))
                if pvc is None:
                    c.error = f"PersistentVolumeClaim {rep.namespace}/{claim} not found"
                    break
                zones: tuple[str, ...] = ()
                if pvc.volume_name:
                    pv = pvs.get(pvc.volume_name)
                    zones = pv.zones if pv else ()
                else:
                    sc = scs.get(pvc.storage_class or "")
                    if sc is not None and sc.volume_binding_mode != "WaitForFirstConsumer":
                        c.error = (f"PersistentVolumeClaim {rep.namespace}/{claim} is not bound yet "
                                   f"(StorageClass {sc.name} binds Immediately)")
                        break
                    zones = sc.zones if sc else ()
                if zones:
                    c.zone_pin = frozenset(zones) if c.zone_pin is None else c.zone_pin & frozenset(zones)
            if c.zone_pin is not None and not c.zone_pin:
                c.error = "its volumes are in different zones"
            out.append(c)
        # Conflicts (hostname anti-affinity both ways, shared host ports) and per-node caps.
        shaped = [c for c in out if c.rep.pod_anti_affinity or c.rep.host_ports or c.rep.pod_affinity
                  or any(t.topology_key == HOSTNAME_LABEL for t in c.rep.topology_spread)]
        for c in shaped:
            for t in c.rep.topology_spread:
                if t.topology_key == HOSTNAME_LABEL:
                    ids = frozenset(d.id for d in out if _selects(t.label_selector, owner_ns=c.rep.namespace, pod=d))
                    c.host_spread.append((t.max_skew, ids, t))
                    if c.id in ids:
                        c.cap = min(c.cap, t.max_skew)
            ports = {(hp.port, hp.protocol) for hp in c.rep.host_ports}
            for d in out:
                anti = any(t.topology_key == HOSTNAME_LABEL and _selects(t, owner_ns=c.rep.namespace, pod=d)
                           for t in c.rep.pod_anti_affinity)
                anti = anti or any(t.topology_key == HOSTNAME_LABEL and _selects(t, owner_ns=d.rep.namespace, pod=c)
                                   for t in d.rep.pod_anti_affinity)
                shared = bool(ports & {(hp.port, hp.protocol) for hp in d.rep.host_ports})
                if anti or shared:
                    c.conflicts.add(d.id)
                    d.conflicts.add(c.id)
            if c.id in c.conflicts:
                c.cap = 1
        return out

    def _kubelet(self, pool: NodePool) -> tuple[KubeletConfiguration | None, int | None]:
        nc: NodeClass | None = self.snap.node_classes.get(pool.node_class_ref)
        kubelet = pool.kubelet or (nc.kubelet if nc else None)
        root = None
        if nc is not None:
            for bdm in nc.block_device_mappings:
                if (bdm.root_volume or len(nc.block_device_mappings) == 1) and bdm.ebs and bdm.ebs.volume_size:
                    root = res.parse_resource_list({"x": bdm.ebs.volume_size})["x"]
        return kubelet, root

    def _pools(self) -> list[_Pool]:
        by_type: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
        for o in self.snap.offerings:
            if o.available and (o.instance_type, o.zone, o.capacity_type) not in self.unavailable:
                by_type[o.instance_type].append((o.zone, o.capacity_type, o.price))
        out = []
        for idx, pool in enumerate(sorted(self.snap.node_pools, key=lambda p: (-p.weight, p.name))):
            kubelet, root = self._kubelet(pool)
            type_reqs = [r for r in pool.requirements if r.key in WELL_KNOWN_KEYS
                         and r.key not in ZONE_KEYS and r.key not in _CT and r.key != NODEPOOL_LABEL]
            zone_reqs = [r for r in pool.requirements if r.key in ZONE_KEYS]
            ct_reqs = [r for r in pool.requirements if r.key == CAPACITY_TYPE_LABEL]
            pool_labels = {**pool.labels, NODEPOOL_LABEL: pool.name}
            daemons = [d.template for d in self.snap.daemonsets
                       if not tolerates_all(d.template.tolerations, pool.taints)]
            types: list[_Type] = []
            zones: set[str] = set()
            cts: set[str] = set()
            for it in self.snap.instance_types:
                labels = instance_type_labels(it)
                if not all(requirement_allows(r, labels.get(r.key)) for r in type_reqs):
                    continue
                offers = {}
                for zone, ct, price in by_type.get(it.name, ()):
                    if (ct == "spot" and not it.supports_spot) or (ct == "on-demand" and not it.supports_on_demand):
                        continue
                    if all(requirement_allows(r, zone) for r in zone_reqs) and all(
                            requirement_allows(r, ct) for r in ct_reqs):
                        offers[(zone, ct)] = price
                if not offers:
                    continue
                alloc = allocatable(it, kubelet=kubelet, root_volume_bytes=root)
                node_view = {**labels, **pool_labels}
                for d in daemons:
                    if any(all(_label_ok(r, node_view) for r in v) for v in _variants(d)[-1:]):
                        alloc = res.subtract(alloc, d.requests)
                types.append(_Type(it.name, labels, self.vec(alloc),
                                   {**capacity(it, kubelet=kubelet, root_volume_bytes=root), "nodes": 1}, offers))
                zones.update(z for z, _ in offers)
                cts.update(c for _, c in offers)
            custom: dict[str, list[Requirement]] = defaultdict(list)
            for r in pool.requirements:
                if r.key not in WELL_KNOWN_KEYS:
                    custom[r.key].append(r)
            out.append(_Pool(pool, pool.node_class_ref, types, frozenset(zones), frozenset(cts), dict(custom),
                             self._usage(pool), idx))
        return out

    def _usage(self, pool: NodePool) -> dict[str, int]:
        usage: dict[str, int] = {}
        if not pool.limits:
            return usage
        for n in self.snap.nodes:
            if n.labels.get(NODEPOOL_LABEL) == pool.name and not n.deleting:
                usage = res.add(usage, {**n.capacity, "nodes": 1})
        types = {it.name: it for it in self.snap.instance_types}
        kubelet, root = self._kubelet(pool)
        for f in self.snap.in_flight:
            it = types.get(f.instance_type)
            if f.node_pool == pool.name and it is not None:
                usage = res.add(usage, {**capacity(it, kubelet=kubelet, root_volume_bytes=root), "nodes": 1})
        return usage

    def _existing_nodes(self) -> list[_Node]:
        bound: dict[str, list[Pod]] = defaultdict(list)
        for p in self.snap.pods:
            if p.node_name and not p.is_finished:
                bound[p.node_name].append(p)
        out = []
        registered = set()
        for n in self.snap.nodes:
            if n.instance_id:
                registered.add(n.instance_id)
            if n.unschedulable or n.deleting:
                continue
            free = res.subtract(n.allocatable, res.total(p.requests for p in bound[n.name]))
            zone = n.zone or ""
            labels = {**n.labels, HOSTNAME_LABEL: n.labels.get(HOSTNAME_LABEL, n.name)}
            out.append(_Node(n.name, labels, _live_taints(n), self.vec(free), self.vec({}),
                             frozenset({zone}), frozenset({n.labels.get(CAPACITY_TYPE_LABEL, "on-demand")}),
                             bound=bound[n.name]))
        types = {it.name: it for it in self.snap.instance_types}
        pools = {p.pool.name: p for p in self.pools}
        for f in self.snap.in_flight:
            it = types.get(f.instance_type)
            if it is None or f.instance_id in registered:
                continue
            pool = pools.get(f.node_pool)
            kubelet, root = self._kubelet(pool.pool) if pool else (None, None)
            alloc = allocatable(it, kubelet=kubelet, root_volume_bytes=root)
            t = next((t for t in pool.types if t.name == it.name), None) if pool else None
            labels = {**instance_type_labels(it), ZONE_LABEL: f.zone, CAPACITY_TYPE_LABEL: f.capacity_type,
                      NODEPOOL_LABEL: f.node_pool, **(pool.pool.labels if pool else {}), **f.labels}
            out.append(_Node(f.instance_id, labels, f.taints, t.alloc if t else self.vec(alloc), self.vec({}),
                             frozenset({f.zone}), frozenset({f.capacity_type}), launched_for=f.pod_keys))
        return out

    # ---- requirements against NodePools ----

    def _target(self, c: _Class, variant: tuple[Requirement, ...], pool: _Pool) -> _Target | str:
        name = f"NodePool {pool.pool.name}"
        if not pool.types:
            return (f"{name}: no instance type has a priced offering its requirements allow "
                    f"(capacity types {list(pool.pool.capacity_types)})")
        untolerated = tolerates_all(c.rep.tolerations, pool.pool.taints)
        if untolerated:
            t = untolerated[0]
            return f"{name}: taint {t.key}{'=' + t.value if t.value else ''}:{t.effect} not tolerated"
        zones, cts = set(pool.zones), set(pool.cts)
        if c.zone_pin is not None:
            zones &= c.zone_pin
        type_reqs, labels = [], {}
        for r in variant:
            if r.key in ZONE_KEYS:
                zones = {z for z in zones if requirement_allows(r, z)}
            elif r.key == CAPACITY_TYPE_LABEL:
                cts = {x for x in cts if requirement_allows(r, x)}
            elif r.key == NODEPOOL_LABEL:
                if not requirement_allows(r, pool.pool.name):
                    return f"{name}: requirement {_describe(r)} not satisfied"
            elif r.key in WELL_KNOWN_KEYS:
                type_reqs.append(r)
            elif r.key in pool.pool.labels:
                if not requirement_allows(r, pool.pool.labels[r.key]):
                    return f"{name}: label {r.key}={pool.pool.labels[r.key]} does not satisfy {_describe(r)}"
            elif r.key in pool.custom:
                value = _intersect(r, pool.custom[r.key])
                if value is False:
                    return f"{name}: requirement {_describe(r)} conflicts with the NodePool's requirements"
                if isinstance(value, str):
                    labels[r.key] = value
            elif r.operator not in ("NotIn", "DoesNotExist"):
                return f"{name}: requirement {_describe(r)} not satisfied (the NodePool does not set label {r.key})"
        if not zones:
            return f"{name}: no offering in an allowed zone"
        if not cts:
            return f"{name}: no allowed capacity type"
        types = [t for t in pool.types if all(requirement_allows(r, t.labels.get(r.key)) for r in type_reqs)
                 and any((z, ct) in t.offerings for z in zones for ct in cts)]
        if not types:
            reqs = ", ".join(_describe(r) for r in type_reqs) or "zone/capacity type"
            return f"{name}: no instance type satisfies {reqs}"
        sig = (pool.index, variant, c.zone_pin)
        return _Target(pool, types, frozenset(zones), frozenset(cts), labels, sig)

    def _resolve(self, c: _Class) -> str | None:
        """Pick the class's requirement variant and its NodePool targets; a reason when nothing fits."""
        reasons: list[str] = []
        for variant in c.variants:
            targets, reasons = [], []
            for pool in self.pools:
                key = (pool.index, variant, c.zone_pin, c.rep.tolerations)
                t = self.target_cache.get(key)
                if t is None:
                    t = self.target_cache[key] = self._target(c, variant, pool)
                if isinstance(t, str):
                    reasons.append(t)
                    continue
                fits = self.fits_cache.get((key, c.req))
                if fits is None:
                    fits = self.fits_cache[(key, c.req)] = [x for x in t.types if _le(c.req, x.alloc)]
                if not fits:
                    reasons.append(f"NodePool {pool.pool.name}: requests ({_fmt(c.rep.requests)}) exceed the "
                                   f"largest instance type it allows")
                    continue
                targets.append(replace(t, types=fits))
            if targets or any(self._node_ok(c, n, variant) for n in self.existing):
                c.targets, c.variant = targets, variant
                return None
        if not self.pools:
            return "no NodePool is defined"
        return "; ".join(reasons) or "no NodePool or node matches"

    def _node_ok(self, c: _Class, n: _Node, variant: tuple[Requirement, ...]) -> bool:
        if tolerates_all(c.rep.tolerations, n.taints):
            return False
        if c.zone_pin is not None and not (n.zones & c.zone_pin):
            return False
        return all(_label_ok(r, n.labels) for r in variant)

    # ---- main loop ----

    def run(self) -> Plan:
        order = sorted(self.classes, key=lambda c: (
            0 if any(t.topology_key == HOSTNAME_LABEL for t in c.rep.pod_affinity) else
            1 if c.cap < (1 << 30) or c.conflicts else 2 if c.rep.pod_affinity else 3,
            tuple(-x for x in c.req)))
        # Resolve every class before placing any: node sizing for shaped classes (``_share``) needs
        # the whole pending demand of each NodePool, not just the classes placed so far.
        for c in order:
            if c.error is None:
                c.error = self._resolve(c)
        self._place_launched_for()
        flexible: list[_Chunk] = []  # pods of unshaped classes still to place
        for i, c in enumerate(order):
            if i % 8 == 7:  # drop nodes no remaining class could use, so scans stay short
                floor = tuple(min(d.req[j] for d in order[i:]) for j in range(len(self.keys)))
                self.open = [n for n in self.open if _fit(n.free, floor) > 0]
            if c.error is not None:
                self._unschedulable(c, len(c.pods), c.error)
                continue
            shaped = c.cap < (1 << 30) or bool(c.conflicts) or any(
                t.topology_key == HOSTNAME_LABEL for t in c.rep.pod_affinity)
            for zones, cts, count in self._chunks(c):
                if shaped:
                    self._place(c, zones, cts, count)
                else:
                    left = self._place_existing(c, zones, cts, count)
                    if left:
                        flexible.append(_Chunk(c, zones, cts, left))
        # Classes free to go anywhere fill the nodes opened for shaped ones together, node by node,
        # balancing CPU against memory; what is left is packed in bulk.
        self._fill_open(flexible)
        for ch in flexible:
            if ch.left:
                self._defer(ch.cls, ch.zones, ch.cts, ch.left)
        self._pack_deferred()
        self._finish()
        return self.plan

    def _place_launched_for(self) -> None:
        """Pods an in-flight instance was launched for go back onto it before anything else, so a later
        pass never launches again for them (when they still fit and still may go there)."""
        flights = [n for n in self.existing if n.launched_for]
        if not flights:
            return
        cls_of = {p.key: c for c in self.classes if c.error is None for p in c.pods}
        for n in flights:
            for key in n.launched_for:
                c = cls_of.pop(key, None)
                if c is None:
                    continue
                if (not self._node_ok(c, n, c.variant) or self._conflict(c, n) or _fit(n.free, c.req) < 1
                        or self._node_cap(c, n) < 1):
                    continue
                self._put(c, n, 1)
                n.pinned.setdefault(c.id, []).append(key)
                zone = n.labels.get(ZONE_LABEL)
                if zone:
                    c.zone_counts[zone] = c.zone_counts.get(zone, 0) + 1

    def _unschedulable(self, c: _Class, count: int, reason: str) -> None:
        start = c.placed
        for p in c.pods[start:start + count]:
            self.plan.unschedulable.append(Unschedulable(p.key, reason))
        c.placed += count

    def _matching_counts(self, c: _Class, selector: PodAffinityTerm | LabelSelector | None, key: str,
                         *, namespaces: tuple[str, ...] = (),
                         spread: TopologySpreadConstraint | None = None) -> dict[str, int]:
        """Pods matching ``selector`` per domain of ``key`` (zone or capacity type): bound + planned.
        For a spread constraint only nodes its node policies admit count."""
        counts: dict[str, int] = defaultdict(int)
        label = ZONE_LABEL if key in ZONE_KEYS else key
        for n in self.existing:
            value = n.labels.get(label)
            if value is None or (spread is not None and not self._spread_node(c, n, spread)):
                continue
            for p in n.bound:
                if _selects(selector, owner_ns=c.rep.namespace, pod=p, namespaces=namespaces):
                    counts[value] += 1
        if label == ZONE_LABEL:
            for d in self.classes:
                if d.zone_counts and _selects(selector, owner_ns=c.rep.namespace, pod=d, namespaces=namespaces):
                    for z, k in d.zone_counts.items():
                        counts[z] += k
        return counts

    def _spread_node(self, c: _Class, n: _Node, tsc: TopologySpreadConstraint) -> bool:
        """Whether an existing node is a domain of ``tsc`` (nodeAffinityPolicy, nodeTaintsPolicy)."""
        if tsc.node_affinity_policy == "Honor" and not all(_label_ok(r, n.labels) for r in c.variant):
            return False
        return tsc.node_taints_policy == "Ignore" or not tolerates_all(c.rep.tolerations, n.taints)

    def _spread_domains(self, c: _Class, tsc: TopologySpreadConstraint) -> set[str]:
        """Every domain the skew is measured over: those of the NodePools and nodes the node policies
        admit, whether or not this pod may go there (a volume pinned to one zone does not remove the
        others from the skew, as in kube-scheduler)."""
        is_ct = tsc.topology_key == CAPACITY_TYPE_LABEL
        label = CAPACITY_TYPE_LABEL if is_ct else ZONE_LABEL
        out: set[str] = set()
        if tsc.node_affinity_policy == "Honor":
            for t in c.targets:
                out |= t.cts if is_ct else t.zones
        else:
            for pool in self.pools:
                if tsc.node_taints_policy == "Ignore" or not tolerates_all(c.rep.tolerations, pool.pool.taints):
                    out |= pool.cts if is_ct else pool.zones
        for n in self.existing:
            if n.labels.get(label) and self._spread_node(c, n, tsc):
                out.add(n.labels[label])
        return out

    def _domains(self, c: _Class, key: str) -> set[str]:
        out: set[str] = set()
        for t in c.targets:
            out |= t.zones if key != CAPACITY_TYPE_LABEL else t.cts
        label = ZONE_LABEL if key in ZONE_KEYS else key
        for n in self.existing:
            if self._node_ok(c, n, c.variant) and n.labels.get(label):
                out.add(n.labels[label])
        if c.zone_pin is not None and key != CAPACITY_TYPE_LABEL:
            out &= c.zone_pin
        return out

    def _chunks(self, c: _Class) -> list[tuple[frozenset[str] | None, frozenset[str] | None, int]]:
        """Split the class into (zones, capacity types, count) by spread, zonal affinity/anti-affinity."""
        n = len(c.pods) - c.placed
        zone_sets: list[tuple[frozenset[str] | None, int]] = [(c.zone_pin, n)]
        for term in c.rep.pod_affinity:
            if term.topology_key not in ZONE_KEYS:
                continue
            counts = self._matching_counts(c, term, ZONE_LABEL)
            domains = self._domains(c, ZONE_LABEL)
            have = sorted((z for z in counts if z in domains), key=lambda z: (-counts[z], z))
            if have:
                zone_sets = [(frozenset({have[0]}), n)]
            elif _selects(term, owner_ns=c.rep.namespace, pod=c) and domains:
                zone_sets = [(frozenset({self._cheapest_zone(c, domains)}), n)]
            else:
                self._unschedulable(c, n, "pod affinity: no pod in any zone matches its required podAffinity")
                return []
        for term in c.rep.pod_anti_affinity:
            if term.topology_key not in ZONE_KEYS:
                continue
            counts = self._matching_counts(c, term, ZONE_LABEL)
            free = sorted(z for z in self._domains(c, ZONE_LABEL) if counts.get(z, 0) == 0)
            if _selects(term, owner_ns=c.rep.namespace, pod=c):
                zone_sets = [(frozenset({z}), 1) for z in free[:n]]
                if n > len(free):
                    self._unschedulable(c, n - len(free), "pod anti-affinity on zone: every allowed zone "
                                        "already has a matching pod")
            else:
                zone_sets = [(frozenset(free), n)] if free else []
                if not free:
                    self._unschedulable(c, n, "pod anti-affinity on zone: every allowed zone has a matching pod")
        out: list[tuple[frozenset[str] | None, frozenset[str] | None, int]] = []
        for zones, count in zone_sets:
            parts: list[tuple[frozenset[str] | None, frozenset[str] | None, int]] = [(zones, None, count)]
            for tsc in c.rep.topology_spread:
                if tsc.topology_key in ZONE_KEYS or tsc.topology_key == CAPACITY_TYPE_LABEL:
                    is_zone = tsc.topology_key in ZONE_KEYS
                    domains = self._domains(c, tsc.topology_key)
                    if is_zone and zones is not None:
                        domains &= zones
                    every = self._spread_domains(c, tsc) | domains
                    counts = self._matching_counts(c, tsc.label_selector, tsc.topology_key, spread=tsc)
                    hard = tsc.when_unsatisfiable == "DoNotSchedule"
                    # minDomains: with fewer eligible domains than asked, the global minimum is 0.
                    min_zero = hard and tsc.min_domains is not None and len(every) < tsc.min_domains
                    new_parts: list[tuple[frozenset[str] | None, frozenset[str] | None, int]] = []
                    for pz, pc, pn in parts:
                        doms = domains & (pz or domains) if is_zone else domains & (pc or domains)
                        if not doms:
                            self._unschedulable(c, pn, f"topology spread on {tsc.topology_key}: no allowed domain")
                            continue
                        got, over = _spread(doms, every, counts, pn, max_skew=tsc.max_skew, min_zero=min_zero)
                        if over and hard:
                            self._unschedulable(c, over, f"topology spread on {tsc.topology_key}: maxSkew "
                                                f"{tsc.max_skew} would be exceeded in every domain it may use")
                        elif over:  # ScheduleAnyway: a preference, relaxed once it cannot be met
                            extra = _water_fill(doms, {d: counts.get(d, 0) + got.get(d, 0) for d in doms}, over)
                            for d, k in extra.items():
                                got[d] = got.get(d, 0) + k
                        for dom, k in sorted(got.items()):
                            if k:
                                new_parts.append((frozenset({dom}), pc, k) if is_zone else (pz, frozenset({dom}), k))
                                counts[dom] = counts.get(dom, 0) + k
                    parts = new_parts
            out.extend(parts)
        for zones, _, k in out:
            if zones is not None and len(zones) == 1:
                z = next(iter(zones))
                c.zone_counts[z] = c.zone_counts.get(z, 0) + k
        return out

    def _cheapest_zone(self, c: _Class, domains: set[str]) -> str:
        best: tuple[float, str] = (_INF, min(domains))
        for t in c.targets:
            for ty in t.types[:20]:
                for z in domains & t.zones:
                    best = min(best, (_sizing_price(ty, frozenset({z}), t.cts), z))
        return best[1]

    def _conflict(self, c: _Class, n: _Node) -> bool:
        if c.conflicts and any(d in c.conflicts for d in n.classes):
            return True
        if n.bound:
            for p in n.bound:
                for t in c.rep.pod_anti_affinity:
                    if t.topology_key == HOSTNAME_LABEL and _selects(t, owner_ns=c.rep.namespace, pod=p):
                        return True
                for t in p.pod_anti_affinity:
                    if t.topology_key == HOSTNAME_LABEL and _selects(t, owner_ns=p.namespace, pod=c):
                        return True
                if c.rep.host_ports and {(h.port, h.protocol) for h in p.host_ports} & {
                        (h.port, h.protocol) for h in c.rep.host_ports}:
                    return True
        return False

    def _node_cap(self, c: _Class, n: _Node) -> int:
        """Pods of ``c`` the node may still take: its own cap, and for each hostname spread constraint
        maxSkew minus the matching pods already there (a new node is always a domain with zero, so the
        minimum is zero and skew is the node's own count)."""
        cap = c.cap - n.classes.get(c.id, 0)
        for skew, ids, t in c.host_spread:
            have = sum(k for d, k in n.classes.items() if d in ids)
            if n.bound:
                have += sum(1 for p in n.bound if _selects(t.label_selector, owner_ns=c.rep.namespace, pod=p))
            cap = min(cap, skew - have)
        return cap

    def _hostname_affinity(self, c: _Class) -> list[_Node] | None:
        """Nodes that already hold pods a hostname podAffinity term selects; None when unconstrained."""
        terms = [t for t in c.rep.pod_affinity if t.topology_key == HOSTNAME_LABEL]
        if not terms:
            return None
        found = []
        for n in [*self.existing, *self.new_nodes]:
            if all(any(_selects(t, owner_ns=c.rep.namespace, pod=p) for p in n.bound)
                   or any(_selects(t, owner_ns=c.rep.namespace, pod=self.classes[d]) for d in n.classes)
                   for t in terms):
                found.append(n)
        return found

    def _put(self, c: _Class, n: _Node, k: int) -> None:
        n.used = _add(n.used, c.req, k)
        n.free = _sub(n.limit, n.used)
        n.classes[c.id] = n.classes.get(c.id, 0) + k
        c.placed += k

    def _place(self, c: _Class, zones: frozenset[str] | None, cts: frozenset[str] | None, count: int) -> None:
        affinity_nodes = self._hostname_affinity(c)
        self_affine = affinity_nodes is not None and all(
            _selects(t, owner_ns=c.rep.namespace, pod=c) for t in c.rep.pod_affinity
            if t.topology_key == HOSTNAME_LABEL)
        candidates = self.existing if affinity_nodes is None else [n for n in affinity_nodes if n.name]
        count = self._place_existing(c, zones, cts, count, candidates)
        if count == 0:
            return
        opened = self.open if affinity_nodes is None else [n for n in affinity_nodes if not n.name]
        rc, rm = c.req[0], c.req[1]  # cpu and memory come first in self.keys
        for n in opened:
            if count == 0:
                return
            f = n.free
            if f[0] < rc or f[1] < rm or f[2] < 1:  # the common case, checked without a call
                continue
            k = self._open_fit(c, n, zones, cts, count)
            if k > 0:
                self._put(c, n, k)
                count -= k
        if count == 0:
            return
        if affinity_nodes:
            self._unschedulable(c, count, "pod affinity on hostname: the node with matching pods is full")
            return
        if affinity_nodes is not None and not self_affine:
            self._unschedulable(c, count, "pod affinity on hostname: no pod matches its required podAffinity")
            return
        if affinity_nodes is not None or c.cap < (1 << 30) or c.conflicts:
            self._open_nodes(c, zones, cts, count, single=affinity_nodes is not None)
            return
        self._defer(c, zones, cts, count)

    def _place_existing(self, c: _Class, zones: frozenset[str] | None, cts: frozenset[str] | None, count: int,
                        candidates: list[_Node] | None = None) -> int:
        """Put what fits on existing nodes and in-flight instances; returns how many are left."""
        for n in self.existing if candidates is None else candidates:
            if count == 0:
                break
            if (zones is not None and not n.zones & zones) or (cts is not None and not n.cts & cts):
                continue
            if not self._node_ok(c, n, c.variant) or self._conflict(c, n):
                continue
            k = min(count, _fit(n.free, c.req))
            if k > 0:
                k = min(k, self._node_cap(c, n))
            if k > 0:
                self._put(c, n, k)
                count -= k
        return count

    def _fill_open(self, items: list[_Chunk]) -> None:
        """Fill the nodes opened so far from ``items`` (their ``left`` decremented in place): per node,
        take from the CPU-heavy end when memory is the fuller dimension and from the memory-heavy end
        otherwise, in small chunks, as ``_fill_balanced`` does."""
        cpu, mem = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        live = sorted(items, key=lambda it: (it.cls.req[mem] / max(it.cls.req[cpu], 1), it.cls.id))
        for n in self.open:
            live = [it for it in live if it.left]
            if not live:
                return
            lo, hi = 0, len(live) - 1
            lim_c, lim_m = max(n.limit[cpu], 1), max(n.limit[mem], 1)
            while lo <= hi:
                f = n.free
                take_lo = f[cpu] / lim_c >= f[mem] / lim_m
                it = live[lo] if take_lo else live[hi]
                c, left = it.cls, it.left
                k = 0
                if left and f[cpu] >= c.req[cpu] and f[mem] >= c.req[mem] and f[2] >= 1:
                    want = min(left, max(1, _fit(n.limit, c.req) // 16))
                    k = self._open_fit(c, n, it.zones, it.cts, want)
                if k > 0:
                    self._put(c, n, k)
                    it.left = left - k
                if k <= 0 or it.left == 0:
                    if take_lo:
                        lo += 1
                    else:
                        hi -= 1

    def _defer(self, c: _Class, zones: frozenset[str] | None, cts: frozenset[str] | None, count: int) -> None:
        """Queue pods for bulk packing on the first NodePool target that can hold them."""
        for t in c.targets:
            z = t.zones if zones is None else t.zones & zones
            ct = t.cts if cts is None else t.cts & cts
            if z and ct:
                key = (t.sig, z, ct)
                entry = self.deferred.setdefault(key, (t, z, ct, []))
                entry[3].append([c, count])
                return
        self._unschedulable(c, count, self._why_not(c, zones))

    def _why_not(self, c: _Class, zones: frozenset[str] | None) -> str:
        if not c.targets:
            return "no existing node has room and no NodePool can launch a node for it"
        return f"no NodePool offers an instance type in zone(s) {sorted(zones or ())}"

    def _open_fit(self, c: _Class, n: _Node, zones: frozenset[str] | None, cts: frozenset[str] | None,
                  count: int) -> int:
        """How many pods of ``c`` a node opened earlier in this plan takes (narrowing its zones, capacity
        types and instance types to what ``c`` allows)."""
        if _fit(n.free, c.req) == 0:
            return 0
        t, ty = n.target, n.type_
        assert t is not None and ty is not None
        x = next((x for x in c.targets if x.pool is t.pool), None)
        if x is None:
            return 0
        same = x.sig == t.sig
        if not same:
            if x.names is None:
                x.names = frozenset(y.name for y in x.types)
            if ty.name not in x.names or any(n.labels.get(k, v) != v for k, v in x.labels.items()):
                return 0
        z = n.zones & x.zones if zones is None else n.zones & x.zones & zones
        ct = n.cts & x.cts if cts is None else n.cts & x.cts & cts
        if not z or not ct or not any((zz, cc) in ty.offerings for zz in z for cc in ct):
            return 0
        if self._conflict(c, n):
            return 0
        k = min(count, self._node_cap(c, n), _fit(n.free, c.req))
        if k > 0:
            n.zones, n.cts = frozenset(z), frozenset(ct)
            if not same:
                assert x.names is not None
                n.allowed = x.names if n.allowed is None else n.allowed & x.names
                n.labels.update(x.labels)
        return k

    def _open_nodes(self, c: _Class, zones: frozenset[str] | None, cts: frozenset[str] | None, count: int,
                    *, single: bool) -> None:
        """New nodes for a class that shapes them (a per-node cap, conflicts, or hostname affinity)."""
        reason = ""
        for t in c.targets:
            z = t.zones if zones is None else t.zones & zones
            ct = t.cts if cts is None else t.cts & cts
            if not z or not ct:
                continue
            types = [x for x in t.types if _sizing_price(x, z, ct) < _INF]
            if not types:
                continue
            per_node = min(c.cap, count)
            if single:
                per_node = count
            share, duals = self._share(c, t)
            want = _add(share, c.req, per_node)
            fitting = [x for x in types if _fit(x.alloc, c.req) >= per_node]
            if fitting:
                # The node's price plus what the part of its share it cannot hold costs when packed in
                # bulk (at the LP's shadow prices): small efficient nodes win when the bulk is cheap,
                # and a node is never bought larger than the pods that will fill it.
                ty = min(fitting, key=lambda x: (_sizing_price(x, z, ct) + sum(
                    y * max(0, w - a) for y, w, a in zip(duals, want, x.alloc, strict=True)), x.name))
            else:
                ty = min(types, key=lambda x: _sizing_price(x, z, ct) / max(min(_fit(x.alloc, c.req), per_node), 1e-9))
            while count > 0:
                k = min(per_node, count, _fit(ty.alloc, c.req))
                if k <= 0:
                    break
                node = self._new_node(t, ty, z, ct)
                if node is None:
                    reason = f"NodePool {t.pool.pool.name} limit reached ({self._limit_key(t.pool, ty)})"
                    break
                self._put(c, node, k)
                count -= k
                if single:
                    break
            if count == 0:
                return
            if single:
                self._unschedulable(c, count, "pod affinity on hostname: its pods do not all fit on one node")
                return
        self._unschedulable(c, count, reason or self._why_not(c, zones))

    def _share(self, c: _Class, t: _Target) -> tuple[Vec, tuple[float, ...]]:
        """What each node opened for a shaped class should also hold: the rest of the NodePool's pending
        demand divided by the number of nodes its largest shaped family needs (a family is a class and
        the classes it may not share a node with), so the other pods fill those nodes instead of new ones."""
        if t.pool.index in self.share_cache:
            return self.share_cache[t.pool.index]
        in_pool = [d for d in self.classes if d.error is None and d.targets and d.targets[0].pool is t.pool]
        total = [0] * len(self.keys)
        for d in in_pool:
            for i, r in enumerate(d.req):
                total[i] += r * len(d.pods)
        nodes, family_demand = 1, [0] * len(self.keys)
        for d in in_pool:
            if d.cap >= (1 << 30) and not d.conflicts:
                continue
            fam = [e for e in in_pool if e.id == d.id or e.id in d.conflicts
                   or any(e.id in ids for _, ids, _t in d.host_spread)]
            need = math.ceil(sum(len(e.pods) for e in fam) / max(d.cap, 1))
            if need > nodes:
                nodes = need
                family_demand = [sum(e.req[i] * len(e.pods) for e in fam) for i in range(len(self.keys))]
        share = tuple(max(0, (a - b)) // nodes for a, b in zip(total, family_demand, strict=True))
        types = [x for x in t.pool.types if _sizing_price(x, t.pool.zones, t.pool.cts) < _INF]
        duals = _duals(types, [(d, len(d.pods)) for d in in_pool] or [(c, len(c.pods))], total,
                       zones=t.pool.zones, cts=t.pool.cts, keys=self.keys)
        self.share_cache[t.pool.index] = (share, duals)
        return share, duals

    def _limit_key(self, pool: _Pool, ty: _Type) -> str:
        for k, lim in pool.pool.limits.items():
            if pool.usage.get(k, 0) + ty.capacity.get(k, 0) > lim:
                return k
        return "nodes"

    def _new_node(self, t: _Target, ty: _Type, zones: frozenset[str], cts: frozenset[str]) -> _Node | None:
        pool = t.pool
        if pool.pool.limits:
            for k, lim in pool.pool.limits.items():
                if pool.usage.get(k, 0) + ty.capacity.get(k, 0) > lim:
                    return None
            pool.usage = res.add(pool.usage, {k: ty.capacity.get(k, 0) for k in pool.pool.limits})
        node = _Node("", dict(t.labels), pool.pool.taints, ty.alloc, tuple(0 for _ in self.keys), zones, cts,
                     target=t, type_=ty, reserved=ty.capacity)
        self.open.append(node)
        self.new_nodes.append(node)
        return node

    # ---- bulk packing of unshaped classes ----

    def _pack_deferred(self) -> None:
        while self.deferred:
            key = min(self.deferred, key=lambda k: self.deferred[k][0].pool.index)
            t, zones, cts, items = self.deferred.pop(key)
            left = self._pack_group(t, zones, cts, [(c, n) for c, n in items])  # type: ignore[misc]
            for c, n in left:
                idx = c.targets.index(t)
                nxt = next((x for x in c.targets[idx + 1:] if x.zones & zones and x.cts & cts), None)
                if nxt is None:
                    why = f"NodePool {t.pool.pool.name} limit reached"
                    self._unschedulable_later(c, n, why)
                else:
                    e = self.deferred.setdefault((nxt.sig, zones & nxt.zones, cts & nxt.cts),
                                                 (nxt, zones & nxt.zones, cts & nxt.cts, []))
                    e[3].append([c, n])

    def _unschedulable_later(self, c: _Class, n: int, reason: str) -> None:
        self.late.append((c, n, reason))

    def _pack_group(self, t: _Target, zones: frozenset[str], cts: frozenset[str],
                    items: list[tuple[_Class, int]]) -> list[tuple[_Class, int]]:
        """Open nodes for ``items`` on target ``t``; returns what a NodePool limit left over.

        Node by node: solve the two-type LP on the demand still to place, open the type the LP uses
        most (or, for the last fraction of a node, ``_residual_node``'s choice), and fill it balancing
        CPU against memory so the node is full in both."""
        types = [x for x in t.types if _sizing_price(x, zones, cts) < _INF]
        rem = {c.id: n for c, n in items}
        cls = {c.id: c for c, _ in items}
        cpu, mem = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        while types and any(rem.values()):
            live = [(cls[cid], n) for cid, n in rem.items() if n > 0]
            demand = [0] * len(self.keys)
            for c, n in live:
                for i, r in enumerate(c.req):
                    demand[i] += r * n
            a, xa, b, xb = _mix(types, live, demand, zones=zones, cts=cts, keys=self.keys)
            if a is None:
                break
            if xa >= 1 or (b is not None and xb >= 1):
                ty = a if xa >= xb or b is None else b
                put, used = _fill_balanced(ty, live, cpu=cpu, mem=mem)
            else:
                duals = _mix_duals(a, b, demand, zones=zones, cts=cts, keys=self.keys)
                ty, put, used = self._residual_node(t, types, live, demand, duals, zones=zones, cts=cts)
            if not put:
                break  # the largest remaining class does not fit this type; handled below
            node = self._new_node(t, ty, zones, cts)
            if node is None:
                break
            node.used, node.free, node.classes = used, _sub(node.limit, used), put
            for cid, k in put.items():
                rem[cid] -= k
                cls[cid].placed += k
        # Anything the mix could not place (a class too big for the chosen type, or a limit) goes one
        # class at a time onto its own cheapest type, then is handed back.
        leftovers = []
        for cid, count in rem.items():
            c, n = cls[cid], count
            while n > 0:
                fits = [x for x in types if _fit(x.alloc, c.req) >= 1]
                if not fits:
                    break
                ty = min(fits, key=lambda x: _sizing_price(x, zones, cts) / min(_fit(x.alloc, c.req), n))
                k = min(n, _fit(ty.alloc, c.req))
                node = self._new_node(t, ty, zones, cts)
                if node is None:
                    break
                self._put(c, node, k)
                n -= k
            if n > 0:
                leftovers.append((c, n))
        return leftovers

    def _residual_node(self, t: _Target, types: list[_Type], live: list[tuple[_Class, int]], demand: list[int],
                       duals: tuple[float, ...], *, zones: frozenset[str],
                       cts: frozenset[str]) -> tuple[_Type, dict[int, int], Vec]:
        """The node for a group's last fraction of a node: of the types that are not beaten on price and
        size, the one whose price per unit of pods it actually takes (valued at the group's shadow
        prices ``duals``) is lowest; the cheapest type that takes everything competes on the same terms,
        so one roomy node loses to a well-filled smaller one plus what remains."""
        cpu, mem = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        key = (id(t), zones, cts)
        cands = self.frontier_cache.get(key)
        if cands is None:
            cands = self.frontier_cache[key] = _frontier([(_sizing_price(x, zones, cts), x) for x in types])
        best: tuple[float, _Type, dict[int, int], Vec] | None = None
        for p, x in cands:
            put, used = _fill_balanced(x, live, cpu=cpu, mem=mem)
            if not put:
                continue
            value = sum(y * u for y, u in zip(duals, used, strict=True))
            ratio = p / value if value > 0 else _INF
            # Within RESIDUAL_TIE, the type that takes more wins: one node rather than two at the same price.
            holds_more = best is not None and _le(best[3], used) and best[3] != used
            if best is None or ratio < best[0] * (1 - RESIDUAL_TIE) or (
                    holds_more and ratio <= best[0] * (1 + RESIDUAL_TIE)):
                best = (ratio, x, put, used)
            if _le(demand, x.alloc):
                break  # larger types only cost more for the same pods
        if best is None:
            ty = types[0]
            return ty, *_fill_balanced(ty, live, cpu=cpu, mem=mem)
        return best[1], best[2], best[3]

    # ---- output ----

    def _finish(self) -> None:
        for c, count, reason in self.late:
            self._unschedulable(c, count, reason)
        cursor = {c.id: 0 for c in self.classes}
        taken = {u.pod for u in self.plan.unschedulable}
        taken.update(k for n in self.existing for keys in n.pinned.values() for k in keys)
        avail = {c.id: [p for p in c.pods if p.key not in taken] for c in self.classes}

        def pods_for(node: _Node) -> list[str]:
            keys: list[str] = []
            for cid, k in node.classes.items():
                mine = node.pinned.get(cid, ())
                keys.extend(mine)
                i = cursor[cid]
                keys.extend(p.key for p in avail[cid][i:i + k - len(mine)])
                cursor[cid] = i + k - len(mine)
            return keys

        for ex in self.existing:
            for key in pods_for(ex):
                self.plan.existing[key] = ex.name
        cache: dict[tuple[object, ...], tuple[str, tuple[str, ...], tuple[str, ...], float] | str] = {}
        for n in self.new_nodes:
            keys = pods_for(n)
            if not keys:
                continue
            assert n.target is not None and n.type_ is not None
            launch = self._launch(n, cache)
            if isinstance(launch, str):
                for k in keys:
                    self.plan.unschedulable.append(Unschedulable(k, launch))
                continue
            ct, zones, types, price = launch
            t = n.target
            pool = t.pool.pool
            labels = {**_single_values(pool.requirements), **pool.labels, **t.labels, NODEPOOL_LABEL: pool.name,
                      CAPACITY_TYPE_LABEL: ct}
            if len(zones) == 1:
                labels[ZONE_LABEL] = zones[0]
            else:
                labels.pop(ZONE_LABEL, None)
            self.plan.launches.append(Launch(
                node_pool=pool.name, node_class=t.pool.node_class, capacity_type=ct, zones=zones,
                instance_types=types, pods=tuple(keys), labels=labels, taints=pool.taints,
                startup_taints=pool.startup_taints, hourly_price=price, capacity_types=pool.capacity_types,
            ))

    def _launch(self, n: _Node, cache: dict[tuple[object, ...], tuple[str, tuple[str, ...], tuple[str, ...], float]
                                             | str]) -> tuple[str, tuple[str, ...], tuple[str, ...], float] | str:
        t, ty = n.target, n.type_
        assert t is not None and ty is not None
        key = (id(t), n.used, n.zones, n.cts, n.allowed, id(ty) if t.pool.pool.limits else None)
        hit = cache.get(key)
        if hit is not None:
            return hit
        result: tuple[str, tuple[str, ...], tuple[str, ...], float] | str = (
            f"NodePool {t.pool.pool.name}: no instance type fits the pods together")
        for ct in ("spot", "on-demand"):
            if ct not in n.cts:
                continue
            skey = (id(t), n.zones, ct)
            ordered = self.sorted_cache.get(skey)
            if ordered is None:
                ordered = sorted(((p, x.name, x) for x in t.types if (p := _price(x, n.zones, ct)) < _INF),
                                 key=lambda e: (e[0], e[1]))
                self.sorted_cache[skey] = ordered
            cands = []
            need_all = any(r.min_values for r in t.pool.pool.requirements)
            for p, name, x in ordered:
                if not _le(n.used, x.alloc) or (n.allowed is not None and name not in n.allowed):
                    continue
                if t.pool.pool.limits and any(x.capacity.get(k, 0) > v for k, v in ty.capacity.items()
                                              if k in t.pool.pool.limits):
                    continue
                cands.append((p, name, x))
                if len(cands) >= MAX_INSTANCE_TYPES and not need_all:
                    break
            if not cands:
                continue
            chosen = _with_min_values([e[2] for e in cands], t.pool.pool.requirements)
            if chosen is None:
                result = (f"NodePool {t.pool.pool.name}: the instance types that fit do not meet its minValues")
                continue
            zones = tuple(sorted(z for z in n.zones if any((z, ct) in x.offerings for x in chosen)))
            result = (ct, zones, tuple(x.name for x in chosen), cands[0][0])
            break
        cache[key] = result
        return result


def _frontier(priced: list[tuple[float, _Type]]) -> list[tuple[float, _Type]]:
    """The priced types no other type beats (at most as dear while holding at least as much of every
    resource), cheapest first."""
    cheapest: dict[Vec, tuple[float, _Type]] = {}  # many families share a size; keep the cheapest
    for p, x in priced:
        seen = cheapest.get(x.alloc)
        if p < _INF and (seen is None or (p, x.name) < (seen[0], seen[1].name)):
            cheapest[x.alloc] = (p, x)
    out: list[tuple[float, _Type]] = []
    for p, x in sorted(cheapest.values(), key=lambda e: (e[0], e[1].name)):
        if not any(_le(x.alloc, y.alloc) for _, y in out):  # every earlier one is at most as dear
            out.append((p, x))
    return out


def _with_min_values(types: list[_Type], reqs: Iterable[Requirement]) -> list[_Type] | None:
    """The cheapest ``MAX_INSTANCE_TYPES`` types, extended (then trimmed) so that every requirement's
    ``minValues`` is met by distinct label values; None when the fitting types cannot meet it."""
    chosen = types[:MAX_INSTANCE_TYPES]
    for r in reqs:
        if not r.min_values:
            continue
        values = {x.labels.get(r.key) for x in chosen}
        if len(values) >= r.min_values:
            continue
        for x in types[MAX_INSTANCE_TYPES:]:
            v = x.labels.get(r.key)
            if v not in values:
                chosen = [*chosen[:-1], x] if len(chosen) >= MAX_INSTANCE_TYPES else [*chosen, x]
                values = {y.labels.get(r.key) for y in chosen}
                if len(values) >= r.min_values:
                    break
        if len(values) < r.min_values:
            return None
    return chosen


def _mix(types: list[_Type], items: list[tuple[_Class, int]], demand: list[int], *, zones: frozenset[str],
         cts: frozenset[str], keys: list[str]) -> tuple[_Type | None, float, _Type | None, float]:
    """The cheapest fractional cover of ``demand`` by one type or a pair of types (the LP over CPU,
    memory and pods, restricted to two types, which is where its optimum lies for two binding
    resources): (type a, nodes of a, type b or None, nodes of b)."""
    biggest = tuple(max(c.req[i] for c, _ in items) for i in range(len(keys)))
    fitting = [x for x in types if _le(biggest, x.alloc)] or types
    priced = [(x, p) for x in fitting if (p := _sizing_price(x, zones, cts)) < _INF]
    if not priced:
        return None, 0.0, None, 0.0
    dims = [i for i, d in enumerate(demand) if d > 0]

    def single(x: _Type) -> float:
        return max((demand[i] / x.alloc[i] if x.alloc[i] > 0 else _INF) for i in dims)

    best_single = min(priced, key=lambda e: e[1] * single(e[0]))
    best_cost = best_single[1] * single(best_single[0])
    best: tuple[_Type, float, _Type | None, float] = (best_single[0], single(best_single[0]), None, 0.0)
    cand: dict[str, tuple[_Type, float]] = {}
    for i in dims:
        for x, p in sorted(priced, key=lambda e: e[1] / e[0].alloc[i] if e[0].alloc[i] else _INF)[:6]:
            cand[x.name] = (x, p)
    for x, p in sorted(priced, key=lambda e: e[1] * single(e[0]))[:8]:  # balanced types pair well too
        cand[x.name] = (x, p)
    pool = list(cand.values())
    for ai, (a, pa) in enumerate(pool):
        for b, pb in pool[ai + 1:]:
            for ii, i in enumerate(dims):
                for j in dims[ii + 1:]:
                    det = a.alloc[i] * b.alloc[j] - a.alloc[j] * b.alloc[i]
                    if det == 0:
                        continue
                    xa = (demand[i] * b.alloc[j] - demand[j] * b.alloc[i]) / det
                    xb = (a.alloc[i] * demand[j] - a.alloc[j] * demand[i]) / det
                    if xa < 0 or xb < 0:
                        continue
                    if any(a.alloc[k] * xa + b.alloc[k] * xb < demand[k] * (1 - 1e-9) for k in dims):
                        continue
                    cost = pa * xa + pb * xb
                    if cost < best_cost * 0.995:
                        best_cost, best = cost, (a, xa, b, xb)
    return best


def _duals(types: list[_Type], items: list[tuple[_Class, int]], demand: list[int], *, zones: frozenset[str],
           cts: frozenset[str], keys: list[str]) -> tuple[float, ...]:
    """Shadow prices per unit of each resource of the cheapest fractional cover of ``demand`` (the
    dual of ``_mix``'s LP): what one more unit costs when packed in bulk. Zero where not binding."""
    if not types or not any(demand):
        return (0.0,) * len(keys)
    a, _, b, _ = _mix(types, items, demand, zones=zones, cts=cts, keys=keys)
    return _mix_duals(a, b, demand, zones=zones, cts=cts, keys=keys)


def _mix_duals(a: _Type | None, b: _Type | None, demand: list[int], *, zones: frozenset[str], cts: frozenset[str],
               keys: list[str]) -> tuple[float, ...]:
    """``_duals`` for the types ``_mix`` chose for ``demand``."""
    y = [0.0] * len(keys)
    if a is None:
        return tuple(y)
    pa = _sizing_price(a, zones, cts)
    dims = [i for i, d in enumerate(demand) if d > 0]
    if b is None:
        i = max(dims, key=lambda k: demand[k] / a.alloc[k] if a.alloc[k] > 0 else _INF)
        if a.alloc[i] > 0:
            y[i] = pa / a.alloc[i]
        return tuple(y)
    pb = _sizing_price(b, zones, cts)
    best = -1.0
    for ii, i in enumerate(dims):
        for j in dims[ii + 1:]:
            det = a.alloc[i] * b.alloc[j] - a.alloc[j] * b.alloc[i]
            if det == 0:
                continue
            yi = (pa * b.alloc[j] - pb * a.alloc[j]) / det
            yj = (a.alloc[i] * pb - b.alloc[i] * pa) / det
            value = yi * demand[i] + yj * demand[j]
            if yi >= 0 and yj >= 0 and value > best:
                best, y = value, [0.0] * len(keys)
                y[i], y[j] = yi, yj
    return tuple(y)


def _fill_balanced(ty: _Type, items: list[tuple[_Class, int]], *, cpu: int,
                   mem: int) -> tuple[dict[int, int], Vec]:
    """Fill one node of ``ty`` from ``items``, taking from the CPU-heavy end when memory is the fuller
    dimension and from the memory-heavy end otherwise, in chunks, until nothing more fits."""
    ac, am = max(ty.alloc[cpu], 1), max(ty.alloc[mem], 1)
    order = sorted((c for c, n in items), key=lambda c: ((c.req[mem] / am) / max(c.req[cpu] / ac, 1e-12), c.id))
    left = {c.id: n for c, n in items}
    free = list(ty.alloc)
    put: dict[int, int] = {}
    lo, hi = 0, len(order) - 1
    while lo <= hi:
        cpu_full = 1 - free[cpu] / ac
        mem_full = 1 - free[mem] / am
        c = order[lo] if cpu_full <= mem_full else order[hi]
        k = min(left[c.id], _fit(free, c.req))
        if k <= 0:
            if c is order[lo]:
                lo += 1
            else:
                hi -= 1
            continue
        k = min(k, max(1, _fit(ty.alloc, c.req) // 16))
        put[c.id] = put.get(c.id, 0) + k
        left[c.id] -= k
        free = [f - r * k for f, r in zip(free, c.req, strict=True)]
        if left[c.id] == 0:
            if c is order[lo]:
                lo += 1
            else:
                hi -= 1
    return put, tuple(a - f for a, f in zip(ty.alloc, free, strict=True))


def _spread(allowed: set[str], every: set[str], counts: Mapping[str, int], n: int, *, max_skew: int,
            min_zero: bool) -> tuple[dict[str, int], int]:
    """Place up to ``n`` pods in ``allowed`` domains, always into the one with the fewest matching pods,
    while kube's skew rule admits it: count + 1 - global minimum (over ``every`` domain; 0 when
    ``min_zero``) <= maxSkew. Returns the counts per domain and how many could not be placed."""
    have = {d: counts.get(d, 0) for d in every | allowed}
    out: dict[str, int] = {}
    others = [have[d] for d in have if d not in allowed]
    floor_others = min(others) if others else _INF
    while n > 0:
        d = min(allowed, key=lambda x: (have[x], x))
        if not min_zero and not others and n >= len(allowed) and all(
                have[x] == have[d] for x in allowed):
            q = n // len(allowed)  # level: a whole round each at once (skew stays 0 among them)
            for x in allowed:
                have[x] += q
                out[x] = out.get(x, 0) + q
            n -= q * len(allowed)
            continue
        low = 0 if min_zero else min(floor_others, have[d])
        room = low + max_skew - have[d]
        if room <= 0:
            break
        nxt = min((have[x] for x in allowed if x != d), default=have[d] + n)
        k = int(min(n, room, max(1, nxt - have[d])))
        have[d] += k
        out[d] = out.get(d, 0) + k
        n -= k
    return out, n


def _water_fill(domains: set[str], counts: Mapping[str, int], n: int) -> dict[str, int]:
    """Place ``n`` pods one at a time in the domain with the fewest matching pods (kube's skew rule
    always admits that domain), returning counts per domain."""
    heap = [(counts.get(d, 0), d) for d in sorted(domains)]
    heapq.heapify(heap)
    out = dict.fromkeys(domains, 0)
    while n > 0:
        have, d = heapq.heappop(heap)
        nxt = heap[0][0] if heap else have + n
        k = min(n, max(1, nxt - have))
        out[d] += k
        n -= k
        heapq.heappush(heap, (have + k, d))
    return out


def _sub(a: Sequence[int], b: Sequence[int]) -> Vec:
    return tuple(x - y for x, y in zip(a, b, strict=True))


def _label_ok(r: Requirement, labels: Mapping[str, str]) -> bool:
    if r.key in ZONE_KEYS:
        return requirement_allows(r, labels.get(ZONE_LABEL, labels.get(r.key)))
    return requirement_allows(r, labels.get(r.key))


def _intersect(pod: Requirement, pool_reqs: list[Requirement]) -> str | bool:
    """Whether a pod requirement on a NodePool-defined key can hold; the label value a new node gets
    when one is decided (str), True when compatible without a single value, False when impossible."""
    allowed: set[str] | None = None
    denied: set[str] = set()
    must_exist = False
    for r in pool_reqs:
        if r.operator == "In":
            allowed = set(r.values) if allowed is None else allowed & set(r.values)
            must_exist = True
        elif r.operator == "NotIn":
            denied |= set(r.values)
        elif r.operator == "Exists":
            must_exist = True
        elif r.operator == "DoesNotExist":
            return pod.operator in ("NotIn", "DoesNotExist")
    if pod.operator == "In":
        values = set(pod.values) - denied
        if allowed is not None:
            values &= allowed
        return min(values) if values else False
    if pod.operator == "NotIn":
        if allowed is not None:
            left = allowed - set(pod.values)
            return min(left) if left else False
        return True
    if pod.operator == "DoesNotExist":
        return not must_exist
    if pod.operator == "Exists":
        return min(allowed) if allowed else True
    if allowed is not None:
        ok = sorted(v for v in allowed if requirement_allows(pod, v))
        return ok[0] if ok else False
    return False


def _single_values(reqs: Iterable[Requirement]) -> dict[str, str]:
    return {r.key: r.values[0] for r in reqs if r.operator == "In" and len(r.values) == 1}


def _live_taints(n: Node) -> tuple[Taint, ...]:
    return n.taints


def _describe(r: Requirement) -> str:
    if r.operator in ("Exists", "DoesNotExist"):
        return f"{r.key} {r.operator}"
    return f"{r.key} {r.operator} [{', '.join(r.values)}]"


def _fmt(r: Mapping[str, int]) -> str:
    parts = []
    for k, v in sorted(r.items()):
        if k == res.PODS:
            continue
        if k == res.CPU:
            parts.append(f"cpu={v}m")
        elif k in (res.MEMORY, res.EPHEMERAL_STORAGE):
            parts.append(f"{k}={v / GI:.2f}Gi")
        else:
            parts.append(f"{k}={v}")
    return ", ".join(parts)


def _preferred_terms(p: Pod) -> list[tuple[str, PodAffinityTerm]]:
    """A pending pod's preferred pod (anti-)affinity terms in the order they are given up: affinity
    before anti-affinity (Karpenter's order), the lowest weight first within each."""
    aff = [("affinity", t) for _, t in sorted(p.preferred_pod_affinity, key=lambda wt: wt[0])]
    anti = [("anti", t) for _, t in sorted(p.preferred_pod_anti_affinity, key=lambda wt: wt[0])]
    return aff + anti


def _preferences_as_required(snapshot: PlanInput, terms: Mapping[str, list[tuple[str, PodAffinityTerm]]],
                             relaxed: Mapping[str, int]) -> PlanInput:
    """The snapshot with the preferred pod (anti-)affinity ``terms`` of each pending pod taken as
    required, less the first ``relaxed[pod]`` it has given up; the snapshot itself when there are none."""
    if not terms:
        return snapshot
    pods = []
    for p in snapshot.pods:
        if p.is_pending and p.key in terms:
            kept = terms[p.key][relaxed.get(p.key, 0):]
            pods.append(replace(
                p, preferred_pod_affinity=(), preferred_pod_anti_affinity=(),
                pod_affinity=p.pod_affinity + tuple(t for kind, t in kept if kind == "affinity"),
                pod_anti_affinity=p.pod_anti_affinity + tuple(t for kind, t in kept if kind == "anti")))
        else:
            pods.append(p)
    return replace(snapshot, pods=pods)


def plan(snapshot: PlanInput, *, unavailable: Collection[tuple[str, str, str]] = (),
         timer: Callable[[], float] | None = None) -> Plan:
    """Decide where every pending pod goes. ``unavailable`` lists (instance type, zone, capacity type)
    offerings to avoid (recent insufficient-capacity errors, interrupted spot pools).

    Preferred pod affinity and anti-affinity are honoured as if required; a pod the plan cannot place
    gives up one preferred term and the plan is made again, until it is placed or has none left.

    ``timer`` (a monotonic seconds reading, injected: the domain reads no clock) measures
    ``solve_seconds``; without it that is 0."""
    start = timer() if timer else 0.0
    relaxed: dict[str, int] = {}
    terms = {p.key: _preferred_terms(p) for p in snapshot.pods
             if p.is_pending and (p.preferred_pod_affinity or p.preferred_pod_anti_affinity)}
    while True:
        result = _Scheduler(_preferences_as_required(snapshot, terms, relaxed), unavailable).run()
        stuck = [u.pod for u in result.unschedulable if relaxed.get(u.pod, 0) < len(terms.get(u.pod, ()))]
        if not stuck:
            break
        for key in stuck:
            relaxed[key] = relaxed.get(key, 0) + 1
    result.solve_seconds = timer() - start if timer else 0.0
    return result
