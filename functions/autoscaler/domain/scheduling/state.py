"""The planner's state for one plan: classes, NodePools and existing capacity built from the
``PlanInput``, and the queries placement asks of them (requirements, conflicts, room on a node,
spread domains, limits)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from autoscaler.domain import resources as res
from autoscaler.domain.allocatable import allocatable, capacity
from autoscaler.domain.keys import (
    CAPACITY_TYPE_LABEL,
    HOSTNAME_LABEL,
    NODEPOOL_LABEL,
    WELL_KNOWN_KEYS,
    ZONE_KEYS,
    ZONE_LABEL,
)
from autoscaler.domain.labels import instance_type_labels
from autoscaler.domain.models import (
    Pod,
    Requirement,
    tolerates_all,
)
from autoscaler.domain.nodepool import NodePool, requirement_allows
from autoscaler.domain.plan import Plan, PlanInput, Unschedulable
from autoscaler.domain.scheduling.model import (
    Vec,
    _add,
    _Class,
    _class_key,
    _le,
    _Node,
    _Pool,
    _required_variants,
    _selects,
    _sizing_price,
    _sub,
    _Target,
    _Type,
    _variants,
    selected_label_keys,
)
from autoscaler.domain.scheduling.prepared import (
    PoolTable,
    Prepared,
    bound_pods,
    kubelet_of,
    pending_pods,
    plan_keys,
    pool_table,
    vec,
)
from autoscaler.domain.scheduling.rules import (
    _describe,
    _fmt,
    _intersect,
    _label_ok,
    _live_taints,
    _prefer_no_schedule,
    _with_min_values,
)


class _State:
    """Classes, pools, nodes and what has been placed so far; the queries placement asks."""

    def __init__(self, snap: PlanInput, unavailable: Collection[tuple[str, str, str]], *,
                 prepared: Prepared | None = None) -> None:
        """``prepared``: what a warm caller kept from earlier passes (``prepared.py``); the decisions are
        the same without it."""
        self.snap = snap
        self.unavailable = set(unavailable)
        self.plan = Plan()
        pending = pending_pods(snap)
        self.plan.pending_pods = len(pending)
        self.keys = list(plan_keys(pending))
        self.classes = self._classes(pending)
        self.pools = self._pools(prepared.pools if prepared else None)
        self.existing = self._existing_nodes()
        self.open: list[_Node] = []  # new nodes that may still take pods
        self.new_nodes: list[_Node] = []  # every new node, for the output
        self.late: list[tuple[_Class, int, str]] = []
        self.share_cache: dict[int, tuple[Vec, tuple[float, ...]]] = {}
        self.target_cache: dict[tuple[object, ...], _Target | str] = {}
        self.fits_cache: dict[tuple[object, ...], list[_Type]] = {}
        self.sorted_cache: dict[tuple[object, ...], list[tuple[float, str, _Type]]] = {}
        self.frontier_cache: dict[tuple[object, ...], list[tuple[float, _Type]]] = {}
        self.type_sets: dict[tuple[str, ...], int] = {}
        self.sizing_cache: dict[tuple[object, ...], list[_Type]] = {}
        self.host_targets: set[int] = set()  # classes others follow onto their node (topology.py)
        self.pinned: dict[int, set[str]] = {}  # class id -> keys it must take one value of (topology.py)
        self.deferred: dict[tuple[object, ...], tuple[_Target, frozenset[str], frozenset[str], list[list[object]]]] = {}

    def vec(self, r: Mapping[str, int]) -> Vec:
        return vec(self.keys, r)

    def _classes(self, pending: list[Pod]) -> list[_Class]:
        groups: dict[tuple[object, ...], list[Pod]] = {}
        label_keys = selected_label_keys(self.snap.pods)
        for p in pending:
            groups.setdefault(_class_key(p, label_keys), []).append(p)
        pvcs = {(c.namespace, c.name): c for c in self.snap.pvcs}
        pvs = {v.name: v for v in self.snap.pvs}
        scs = {s.name: s for s in self.snap.storage_classes}
        out = []
        for i, pods in enumerate(groups.values()):
            rep = pods[0]
            c = _Class(id=i, rep=rep, pods=pods, req=self.vec(rep.requests), variants=_variants(rep),
                       required_variants=_required_variants(rep))
            for claim in rep.volume_claims:
                pvc = pvcs.get((rep.namespace, claim))
                if pvc is None and claim in rep.ephemeral_claims:
                    # not created yet from the pod's ephemeral volume template: provisioned like a
                    # WaitForFirstConsumer claim of the template's StorageClass
                    sc = scs.get(rep.ephemeral_claims[claim])
                    if sc is not None and sc.zones:
                        c.zone_pin = frozenset(sc.zones) if c.zone_pin is None else c.zone_pin & frozenset(sc.zones)
                    continue
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

    def _pools(self, table: PoolTable | None) -> list[_Pool]:
        table = pool_table(self.snap, self.unavailable, tuple(self.keys), previous=table)
        return [_Pool(part.pool, part.pool.node_class_ref, list(part.types), part.zones, part.cts, dict(part.custom),
                      self._usage(part.pool), idx, dict(part.daemon_ports)) for idx, part in enumerate(table.parts)]

    def _usage(self, pool: NodePool) -> dict[str, int]:
        usage: dict[str, int] = {}
        if not pool.limits:
            return usage
        for n in self.snap.nodes:
            if n.node_pool == pool.name and not n.deleting:
                usage = res.add(usage, {**n.capacity, "nodes": 1})
        types = {it.name: it for it in self.snap.instance_types}
        kubelet, root = kubelet_of(pool, self.snap.node_classes)
        for f in self.snap.in_flight:
            if f.node_pool != pool.name:
                continue
            # The largest capacity EC2 may have given it (a launch whose answer is unknown): never over the limit.
            caps = [capacity(it, kubelet=kubelet, root_volume_bytes=root)
                    for name in (f.instance_type, *f.may_be) if (it := types.get(name)) is not None]
            if caps:
                most = {k: max(c.get(k, 0) for c in caps) for c in caps for k in c}
                usage = res.add(usage, {**most, "nodes": 1})
        return usage

    def _existing_nodes(self) -> list[_Node]:
        bound = bound_pods(self.snap.pods)
        out = []
        registered = set()
        keys, zero, launched_for = self.keys, self.vec({}), self.snap.launched_for
        # Per node once: this loop runs over every existing node on every pass.
        for n in self.snap.nodes:
            instance_id = n.instance_id
            if instance_id:
                registered.add(instance_id)
            if n.unschedulable or n.deleting:
                continue
            on, requests = bound.load(n.name)
            alloc = n.allocatable
            free = tuple(alloc.get(k, 0) - requests.get(k, 0) for k in keys)
            zone = n.zone or ""
            labels = {**n.labels, HOSTNAME_LABEL: n.labels.get(HOSTNAME_LABEL, n.name)}
            out.append(_Node(n.name, labels, _live_taints(n), free, zero,
                             frozenset({zone}), frozenset({n.labels.get(CAPACITY_TYPE_LABEL, "on-demand")}),
                             bound=on, launched_for=launched_for.get(instance_id or "", ()) if launched_for else ()))
        types = {it.name: it for it in self.snap.instance_types}
        pools = {p.pool.name: p for p in self.pools}
        for f in self.snap.in_flight:
            it = types.get(f.instance_type)
            if it is None or f.instance_id in registered:
                continue
            pool = pools.get(f.node_pool)
            kubelet, root = kubelet_of(pool.pool, self.snap.node_classes) if pool else (None, None)
            alloc = allocatable(it, kubelet=kubelet, root_volume_bytes=root)
            t = next((t for t in pool.types if t.name == it.name), None) if pool else None
            labels = {**instance_type_labels(it), ZONE_LABEL: f.zone, CAPACITY_TYPE_LABEL: f.capacity_type,
                      NODEPOOL_LABEL: f.node_pool, **(pool.pool.labels if pool else {}), **f.labels}
            out.append(_Node(f.instance_id, labels, f.taints, t.alloc if t else self.vec(alloc), self.vec({}),
                             frozenset({f.zone}), frozenset({f.capacity_type}), launched_for=f.pod_keys))
        return out

    def _target(self, c: _Class, variant: tuple[Requirement, ...], pool: _Pool, *,
                taints: bool = True) -> _Target | str:
        name = f"NodePool {pool.pool.name}"
        if not pool.types:
            return (f"{name}: no instance type has a priced offering its requirements allow "
                    f"(capacity types {list(pool.pool.capacity_types)})")
        untolerated = tolerates_all(c.rep.tolerations, pool.pool.taints) if taints else []
        if untolerated:
            t = untolerated[0]
            return f"{name}: taint {t.key}{'=' + t.value if t.value else ''}:{t.effect} not tolerated"
        for hp in c.rep.host_ports:
            ds = pool.daemon_ports.get((hp.port, hp.protocol))
            if ds is not None:
                return f"{name}: host port {hp.port}/{hp.protocol} is taken by DaemonSet {ds} on its nodes"
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
        # Targets that allow the same nodes are one: classes with different but compatible requirements
        # (``team In [x]``, ``team NotIn [y]``) are packed together.
        names = tuple(t.name for t in types)
        sig = (pool.index, self.type_sets.setdefault(names, len(self.type_sets)), frozenset(zones), frozenset(cts),
               tuple(sorted(labels.items())))
        return _Target(pool, types, frozenset(zones), frozenset(cts), labels, sig)

    def _resolve(self, c: _Class) -> str | None:
        """Pick the class's requirement variant and its NodePool targets; a reason when nothing fits."""
        reasons: list[str] = []
        for variant in c.variants:
            targets, reasons = [], []
            for pool in self.pools:
                key = (pool.index, variant, c.zone_pin, c.rep.tolerations, c.rep.host_ports)
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
                    reasons.append(self._too_big(c, t))
                    continue
                sizing = self._min_values_sizing(t, fits)
                if sizing is not None and not sizing:
                    reasons.append(f"NodePool {pool.pool.name}: the instance types that fit its requests "
                                   f"({_fmt(c.rep.requests)}) cannot meet its minValues")
                    continue
                targets.append(replace(t, types=fits, sizing=sizing, base_types=t.types))
            if targets or any(self._node_ok(c, n, variant) for n in self.existing):
                # An untolerated PreferNoSchedule taint is avoided while another NodePool can take the pod.
                targets.sort(key=lambda t: bool(_prefer_no_schedule(c.rep.tolerations, t.pool.pool.taints)))
                c.targets, c.variant = targets, variant
                return None
        if not self.pools:
            return "no NodePool is defined"
        return "; ".join(reasons) or "no NodePool or node matches"

    def _too_big(self, c: _Class, t: _Target) -> str:
        """Why no instance type of ``t`` holds a pod of ``c``: its requests, or the DaemonSet overhead."""
        name = f"NodePool {t.pool.pool.name}"
        raw = [x for x in t.types if _le(c.req, _add(x.alloc, self.vec(x.overhead)))]
        if raw:
            x = max(raw, key=lambda y: y.alloc)
            return (f"{name}: requests ({_fmt(c.rep.requests)}) plus DaemonSet overhead ({_fmt(x.overhead)}) "
                    f"exceed every instance type it allows (largest: {x.name})")
        return f"{name}: requests ({_fmt(c.rep.requests) or 'none'}) exceed the largest instance type it allows"

    def _min_values_sizing(self, t: _Target, fits: list[_Type]) -> list[_Type] | None:
        """With ``minValues`` on the NodePool, the types a node may be filled up to: those for which the
        types at least as large still meet every minValues (so the launch list does); None without."""
        reqs = [r for r in t.pool.pool.requirements if r.min_values]
        if not reqs:
            return None
        key = (t.sig, tuple(x.name for x in fits))
        hit = self.sizing_cache.get(key)
        if hit is None:
            by_price = sorted(t.types, key=lambda y: (_sizing_price(y, t.zones, t.cts), y.name))
            hit = self.sizing_cache[key] = [x for x in fits if _with_min_values(
                [y for y in by_price if _le(x.alloc, y.alloc)], reqs) is not None]
        return hit

    def _node_ok(self, c: _Class, n: _Node, variant: tuple[Requirement, ...], *, taints: bool = True) -> bool:
        if taints and tolerates_all(c.rep.tolerations, n.taints):
            return False
        if c.zone_pin is not None and not (n.zones & c.zone_pin):
            return False
        return all(_label_ok(r, n.labels) for r in variant)

    def _unschedulable(self, c: _Class, count: int, reason: str) -> None:
        start = c.placed
        for p in c.pods[start:start + count]:
            self.plan.unschedulable.append(Unschedulable(p.key, reason))
        c.placed += count

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

    def _why_not(self, c: _Class, zones: frozenset[str] | None) -> str:
        if not c.targets:
            return "no existing node has room and no NodePool can launch a node for it"
        return f"no NodePool offers an instance type in zone(s) {sorted(zones or ())}"

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

    def _unschedulable_later(self, c: _Class, n: int, reason: str) -> None:
        self.late.append((c, n, reason))
