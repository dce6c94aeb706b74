"""The scheduler's working model: resource vectors on the plan's resource keys, instance types and
NodePools as the planner sees them, pod equivalence classes and the nodes (existing, in-flight, new)
pods are placed on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from autoscaler.domain.keys import CAPACITY_TYPE_LABEL
from autoscaler.domain.models import (
    ALL_NAMESPACES,
    LabelSelector,
    Pod,
    PodAffinityTerm,
    Requirement,
    Taint,
    TopologySpreadConstraint,
)
from autoscaler.domain.nodepool import NodePool

MAX_INSTANCE_TYPES = 60
RESIDUAL_TIE = 0.005  # price-per-value margin within which the residual node that holds more wins
_CT = (CAPACITY_TYPE_LABEL,)
_INF = float("inf")

Vec = tuple[int, ...]


# --- vector arithmetic on the plan's resource keys ----------------------------------------------------

# "No bound": pods of a class per node, or requests fitting, when nothing limits them.
UNBOUNDED = 1 << 30


def _fit(free: Sequence[int], req: Sequence[int]) -> int:
    """How many requests of ``req`` fit in ``free``."""
    # Plain loops and comparisons: the planner calls these ~10^5-10^6 times in a 50k-pod pass.
    k = UNBOUNDED
    for f, r in zip(free, req, strict=True):
        if r > 0:
            q = f // r
            if q < k:  # noqa: PLR1730 (min() is a call per element on the hot path)
                k = q
    return k if k > 0 else 0


def _add(a: Sequence[int], b: Sequence[int], times: int = 1) -> Vec:
    return tuple(x + y * times for x, y in zip(a, b, strict=True))


def _le(a: Sequence[int], b: Sequence[int]) -> bool:
    for x, y in zip(a, b, strict=True):  # noqa: SIM110 (all() over a generator is ~2x slower here)
        if x > y:
            return False
    return True

def _sub(a: Sequence[int], b: Sequence[int]) -> Vec:
    return tuple(x - y for x, y in zip(a, b, strict=True))



# --- per NodePool preparation -------------------------------------------------------------------------

@dataclass(eq=False, slots=True)
class _Type:
    name: str
    labels: dict[str, str]
    alloc: Vec  # allocatable minus DaemonSet overhead on this NodePool
    capacity: dict[str, int]
    offerings: dict[tuple[str, str], float]  # (zone, capacity type) -> price
    overhead: dict[str, int] = field(default_factory=dict)  # the DaemonSet requests taken out of ``alloc``
    # (zones, capacity types) -> _sizing_price: asked ~10^5 times per plan for a few dozen distinct keys
    sizing_prices: dict[tuple[frozenset[str], frozenset[str]], float] = field(default_factory=dict)


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
    daemon_ports: dict[tuple[int, str], str] = field(default_factory=dict)  # host port -> the DaemonSet on it


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
    sizing: list[_Type] | None = None  # with minValues: the types nodes are filled up to (state.py)
    base_types: list[_Type] | None = None  # ``types`` before narrowing to what one class's pods fit


def _price(t: _Type, zones: Iterable[str], ct: str) -> float:
    best = _INF
    for z in zones:
        p = t.offerings.get((z, ct))
        if p is not None and p < best:
            best = p
    return best


def _sizing_price(t: _Type, zones: frozenset[str], cts: frozenset[str]) -> float:
    """Price used to size nodes: spot when allowed and offered, else on-demand (what launch will pick)."""
    key = (zones, cts)
    price = t.sizing_prices.get(key)
    if price is None:
        price = t.sizing_prices[key] = _sizing_price_of(t, zones, cts)
    return price


def _sizing_price_of(t: _Type, zones: frozenset[str], cts: frozenset[str]) -> float:
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
    cap: int = UNBOUNDED  # pods of this class per node
    conflicts: set[int] = field(default_factory=set)
    # hostname spread: (maxSkew, ids of the classes its selector matches, the constraint)
    host_spread: list[tuple[int, frozenset[int], TopologySpreadConstraint]] = field(default_factory=list)
    placed: int = 0

    @property
    def shapes_nodes(self) -> bool:
        """Hostname anti-affinity, host ports or hostname spread bound how many of its pods a node holds:
        such a class opens nodes of its own shape instead of joining a group's packing."""
        return self.cap < UNBOUNDED or bool(self.conflicts)
    zone_counts: dict[str, int] = field(default_factory=dict)
    # the variants without preferred node affinity (nodeAffinityPolicy Honor looks at these only)
    required_variants: list[tuple[Requirement, ...]] = field(default_factory=list)
    handled: frozenset[str] = frozenset()  # keys this class was split on (topology.py)
    domain_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # key -> value -> pods put there


def selected_label_keys(pods: Iterable[Pod]) -> frozenset[str]:
    """Every label key a label selector of these pods looks at (spread constraints, pod affinity and
    anti-affinity, required and preferred): the only labels that can tell two pending pods apart here."""
    keys: set[str] = set()
    for p in pods:
        if not (p.topology_spread or p.pod_affinity or p.pod_anti_affinity or p.preferred_pod_affinity
                or p.preferred_pod_anti_affinity):
            continue
        selectors = [t.label_selector for t in p.topology_spread]
        selectors += [t.label_selector for t in (*p.pod_affinity, *p.pod_anti_affinity)]
        selectors += [t.label_selector for _, t in (*p.preferred_pod_affinity, *p.preferred_pod_anti_affinity)]
        for s in selectors:
            if s is not None:
                keys.update(k for k, _ in s.match_labels)
                keys.update(r.key for r in s.match_expressions)
    return frozenset(keys)


def _class_key(p: Pod, label_keys: frozenset[str] | None = None) -> tuple[object, ...]:
    """Pods with equal keys schedule alike. Only the labels in ``label_keys`` (``selected_label_keys`` of
    every pod, pending and bound) count: a StatefulSet's pods differ in ``statefulset.kubernetes.io/pod-name``
    and a Job's in their completion index, and one class per pod made planning quadratic in pods."""
    labels = p.labels.items() if label_keys is None else ((k, v) for k, v in p.labels.items() if k in label_keys)
    return (
        p.namespace, tuple(sorted(labels)), tuple(sorted(p.requests.items())),
        tuple(sorted(p.node_selector.items())), p.required_node_affinity, p.preferred_node_affinity,
        p.tolerations, p.topology_spread, p.pod_affinity, p.pod_anti_affinity, p.host_ports, p.volume_claims,
    )


def _variants(p: Pod) -> list[tuple[Requirement, ...]]:
    """Requirement sets to try in order, Karpenter's: the heaviest preferred term with each required
    term in turn, then with the last required term the next heaviest preferred term alone, and so on,
    and finally the last required term without preferences."""
    base = tuple(Requirement(k, "In", (v,)) for k, v in sorted(p.node_selector.items()))
    terms = [t.requirements for t in p.required_node_affinity] or [()]
    prefs = [t.requirements for _, t in sorted(p.preferred_node_affinity, key=lambda wt: -wt[0])]
    if not prefs:
        return [base + term for term in terms]
    out = [base + term + prefs[0] for term in terms]
    out += [base + terms[-1] + pref for pref in prefs[1:]]
    out.append(base + terms[-1])
    return out


def _required_variants(p: Pod) -> list[tuple[Requirement, ...]]:
    """``_variants`` without the preferences: node selector plus each required term."""
    base = tuple(Requirement(k, "In", (v,)) for k, v in sorted(p.node_selector.items()))
    return [base + t.requirements for t in p.required_node_affinity] or [base]


def _selects(term: PodAffinityTerm | LabelSelector | None, *, owner_ns: str, pod: Pod | _Class,
             namespaces: tuple[str, ...] = ()) -> bool:
    ns = pod.namespace if isinstance(pod, Pod) else pod.rep.namespace
    labels = pod.labels if isinstance(pod, Pod) else pod.rep.labels
    if isinstance(term, PodAffinityTerm):
        namespaces, term = term.namespaces, term.label_selector
    allowed = namespaces or (owner_ns,)
    if ns not in allowed and ALL_NAMESPACES not in allowed:
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
    bound: Sequence[Pod] = ()  # an existing node's bound, unfinished pods
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


