"""What a plan derives from the cluster before placing anything: the bound pods of every node with their
summed requests (``BoundPods``) and each NodePool's instance types, offerings and allocatable less
DaemonSet overhead (``PoolTable``), the latter as an immutable value a warm caller may keep between passes.

A plan made with a kept ``PoolTable`` decides exactly what a plan made without it decides: the table is
used only when the inputs it was made from equal this plan's (compared by value); ``app/plan_prep.py``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.domain import resources as res
from autoscaler.domain.allocatable import allocatable, capacity
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, NODEPOOL_LABEL, WELL_KNOWN_KEYS, ZONE_KEYS
from autoscaler.domain.labels import instance_type_labels
from autoscaler.domain.models import Pod, Requirement, tolerates_all
from autoscaler.domain.nodeclass import KubeletConfiguration, NodeClass
from autoscaler.domain.nodepool import NodePool, requirement_allows
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling.model import _CT, Vec, _Type, _variants
from autoscaler.domain.scheduling.rules import _label_ok

# A node's bound, unfinished pods and the sum of their requests.
NodeLoad = tuple[tuple[Pod, ...], res.Resources]
_NO_LOAD: NodeLoad = ((), {})


@dataclass(frozen=True, slots=True)
class BoundPods:
    """The bound, unfinished pods of each node and their summed requests, by node name."""

    by_node: Mapping[str, NodeLoad]

    def load(self, node: str) -> NodeLoad:
        return self.by_node.get(node, _NO_LOAD)


def bound_pods(pods: Sequence[Pod]) -> BoundPods:
    """``BoundPods`` of ``pods``."""
    grouped: dict[str, list[Pod]] = defaultdict(list)
    for p in pods:
        if p.node_name and not p.is_finished:
            grouped[p.node_name].append(p)
    return BoundPods({name: (tuple(on), res.total(p.requests for p in on)) for name, on in grouped.items()})


def plan_keys(pending: Sequence[Pod]) -> tuple[str, ...]:
    """The resource keys a plan's vectors have: cpu, memory, pods, then any other the pending pods request."""
    keys = [res.CPU, res.MEMORY, res.PODS]
    for p in pending:
        for k, v in p.requests.items():
            if v > 0 and k not in keys:
                keys.append(k)
    return tuple(keys)


def pending_pods(snap: PlanInput) -> list[Pod]:
    """The pods a plan places: pending, not DaemonSet pods."""
    # ``node_name is None`` first: a plain attribute that rules out the (many) bound pods before the property.
    return [p for p in snap.pods if p.node_name is None and p.is_pending and not p.is_daemonset_pod]


def vec(keys: Sequence[str], r: Mapping[str, int]) -> Vec:
    return tuple(r.get(k, 0) for k in keys)


def kubelet_of(pool: NodePool, node_classes: Mapping[str, NodeClass]) -> tuple[KubeletConfiguration | None,
                                                                                 int | None]:
    """The kubelet settings and root volume size (bytes) a NodePool's nodes get."""
    nc: NodeClass | None = node_classes.get(pool.node_class_ref)
    kubelet = pool.kubelet or (nc.kubelet if nc else None)
    root = None
    if nc is not None:
        for bdm in nc.block_device_mappings:
            if (bdm.root_volume or len(nc.block_device_mappings) == 1) and bdm.ebs and bdm.ebs.volume_size:
                root = res.parse_resource_list({"x": bdm.ebs.volume_size})["x"]
    return kubelet, root


@dataclass(frozen=True, slots=True)
class PoolPart:
    """One dynamic NodePool as every plan over the same inputs sees it (its usage is the plan's own)."""

    pool: NodePool
    types: tuple[_Type, ...]
    zones: frozenset[str]
    cts: frozenset[str]
    custom: Mapping[str, list[Requirement]]  # requirements on keys that are not well-known
    daemon_ports: Mapping[tuple[int, str], str]  # host port -> the DaemonSet on it


@dataclass(frozen=True, slots=True)
class PoolTable:
    """``PoolPart`` of every dynamic NodePool, by weight then name, and the inputs they were made from."""

    inputs: tuple[object, ...]
    parts: tuple[PoolPart, ...]


def _table_inputs(snap: PlanInput, unavailable: Collection[tuple[str, str, str]],
                  keys: tuple[str, ...]) -> tuple[object, ...]:
    # Everything ``_parts`` reads. Compared by value (equal lists of the same objects compare in
    # microseconds: list equality tries identity first).
    return (list(snap.node_pools), dict(snap.node_classes), list(snap.daemonsets), list(snap.instance_types),
            list(snap.offerings), dict(snap.node_class_zones), frozenset(unavailable), keys)


def pool_table(snap: PlanInput, unavailable: Collection[tuple[str, str, str]], keys: tuple[str, ...], *,
               previous: PoolTable | None = None) -> PoolTable:
    """The pool table of these inputs: ``previous`` when it was made from equal inputs, else built."""
    inputs = _table_inputs(snap, unavailable, keys)
    if previous is not None and previous.inputs == inputs:
        return previous
    return PoolTable(inputs, tuple(_parts(snap, frozenset(unavailable), keys)))


def _parts(snap: PlanInput, unavailable: frozenset[tuple[str, str, str]], keys: tuple[str, ...]) -> list[PoolPart]:
    by_type: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for o in snap.offerings:
        if o.available and (o.instance_type, o.zone, o.capacity_type) not in unavailable:
            by_type[o.instance_type].append((o.zone, o.capacity_type, o.price))
    out = []
    # A static NodePool keeps its own node count (domain/static_pools.py): never launched into for pods.
    dynamic = [p for p in snap.node_pools if not p.is_static]
    for pool in sorted(dynamic, key=lambda p: (-p.weight, p.name)):
        kubelet, root = kubelet_of(pool, snap.node_classes)
        # A template label on a well-known key (zone, capacity type, arch...) constrains like a requirement.
        reqs = [*pool.requirements, *(Requirement(k, "In", (v,)) for k, v in pool.labels.items()
                                      if k in WELL_KNOWN_KEYS and k != NODEPOOL_LABEL)]
        type_reqs = [r for r in reqs if r.key in WELL_KNOWN_KEYS
                     and r.key not in ZONE_KEYS and r.key not in _CT and r.key != NODEPOOL_LABEL]
        zone_reqs = [r for r in reqs if r.key in ZONE_KEYS]
        ct_reqs = [r for r in reqs if r.key == CAPACITY_TYPE_LABEL]
        reserved = pool.allows_reserved
        pool_labels = {**pool.labels, NODEPOOL_LABEL: pool.name}
        landing = [d for d in snap.daemonsets if not tolerates_all(d.template.tolerations, pool.taints)]
        daemons = [d.template for d in landing]
        types: list[_Type] = []
        zones: set[str] = set()
        cts: set[str] = set()
        subnet_zones = snap.node_class_zones.get(pool.node_class_ref)
        for it in snap.instance_types:
            labels = instance_type_labels(it)
            if not all(requirement_allows(r, labels.get(r.key)) for r in type_reqs):
                continue
            offers = {}
            for zone, ct, price in by_type.get(it.name, ()):
                if (ct == "spot" and not it.supports_spot) or (ct == "on-demand" and not it.supports_on_demand):
                    continue
                if subnet_zones is not None and zone not in subnet_zones:
                    continue  # the node class has no subnet there: EC2 could not launch it
                # A reservation is on-demand capacity: a pool allowing only `reserved` is planned on
                # on-demand offerings and launched into its reservations (app/launcher.py).
                if all(requirement_allows(r, zone) for r in zone_reqs) and (all(
                        requirement_allows(r, ct) for r in ct_reqs) or (ct == "on-demand" and reserved)):
                    offers[(zone, ct)] = price
            if not offers:
                continue
            alloc = allocatable(it, kubelet=kubelet, root_volume_bytes=root)
            node_view = {**labels, **pool_labels}
            overhead: dict[str, int] = {}
            for d in daemons:
                if any(all(_label_ok(r, node_view) for r in v) for v in _variants(d)[-1:]):
                    overhead = res.add(overhead, d.requests)
            alloc = res.subtract(alloc, overhead)
            types.append(_Type(it.name, labels, vec(keys, alloc),
                               {**capacity(it, kubelet=kubelet, root_volume_bytes=root), "nodes": 1}, offers,
                               overhead))
            zones.update(z for z, _ in offers)
            cts.update(c for _, c in offers)
        custom: dict[str, list[Requirement]] = defaultdict(list)
        for r in pool.requirements:
            if r.key not in WELL_KNOWN_KEYS:
                custom[r.key].append(r)
        ports = {(hp.port, hp.protocol): f"{d.namespace}/{d.name}" for d in landing for hp in d.template.host_ports}
        out.append(PoolPart(pool, tuple(types), frozenset(zones), frozenset(cts), dict(custom), ports))
    return out


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a warm caller hands a plan (absent: the plan derives it)."""

    pools: PoolTable | None = None
