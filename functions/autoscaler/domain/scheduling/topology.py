"""Topology for the planner, on any label key: the domains a spread constraint is measured over and
those a class can still use (with how many pods each can take), matching-pod counts per domain, the
order classes are placed in so pod (anti-)affinity sees its targets first, and splitting a class over
the values of a key other than zone, capacity type and hostname (architecture, a NodePool label...)."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import replace

from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, WELL_KNOWN_KEYS, ZONE_KEYS, ZONE_LABEL
from autoscaler.domain.models import (
    LabelSelector,
    Pod,
    PodAffinityTerm,
    Requirement,
    TopologySpreadConstraint,
    tolerates_all,
)
from autoscaler.domain.nodepool import requirement_allows
from autoscaler.domain.scheduling.model import (
    _INF,
    UNBOUNDED,
    _Class,
    _fit,
    _le,
    _Node,
    _Pool,
    _selects,
    _sizing_price,
    _Target,
)
from autoscaler.domain.scheduling.rules import _spread, _water_fill
from autoscaler.domain.scheduling.state import _State

Selector = PodAffinityTerm | LabelSelector | None


def is_generic(key: str, *, spread: bool = False) -> bool:
    """A topology key placed by splitting the class per value: not zone or hostname, nor capacity type
    for topology spread (placement splits those by counts)."""
    return key not in ZONE_KEYS and key != HOSTNAME_LABEL and not (spread and key == CAPACITY_TYPE_LABEL)


def _label(key: str) -> str:
    return ZONE_LABEL if key in ZONE_KEYS else key


class _Topology(_State):
    """Domains, counts and ordering for topology spread and pod (anti-)affinity on any key."""

    # pod key -> its preferred terms this plan takes as required: they bind the pod itself only, never
    # other pods (kube-scheduler's symmetry is for required anti-affinity)
    soft: Mapping[str, frozenset[PodAffinityTerm]] = {}
    requeue: list[_Class]  # classes made while placing, to be placed next (set in ``run``)
    bound_anti: list[tuple[_Node, Pod]] | None = None  # bound pods with pod anti-affinity (lazily)

    def _hard_anti(self, p: Pod) -> Iterable[PodAffinityTerm]:
        soft = self.soft.get(p.key)
        return p.pod_anti_affinity if not soft else (t for t in p.pod_anti_affinity if t not in soft)

    # --- domains -------------------------------------------------------------------------------------

    def _values(self, t: _Target, key: str) -> set[str] | None:
        """The values ``key`` may take on a new node of target ``t``; None when not enumerable (a
        NodePool requirement ``Exists`` without values)."""
        if key in ZONE_KEYS:
            return set(t.zones)
        if key == CAPACITY_TYPE_LABEL:
            return set(t.cts)
        pool = t.pool.pool
        if key in t.labels:
            return {t.labels[key]}
        if key in pool.labels:
            return {pool.labels[key]}
        if key in t.pool.custom:
            allowed: set[str] | None = None
            for r in t.pool.custom[key]:
                if r.operator == "In":
                    allowed = set(r.values) if allowed is None else allowed & set(r.values)
            if allowed is None:
                return None
            return {v for v in allowed if all(requirement_allows(r, v) for r in t.pool.custom[key])}
        if key in WELL_KNOWN_KEYS:
            return {v for x in t.types if (v := x.labels.get(key)) is not None}
        return set()

    def _required(self, c: _Class) -> tuple[Requirement, ...]:
        """The class's variant without its preferred node affinity (what kube's nodeAffinityPolicy
        ``Honor`` looks at): the required variant it extends."""
        for v in c.required_variants:
            if c.variant[:len(v)] == v:
                return v
        return c.variant

    def _pool_target(self, c: _Class, variant: tuple[Requirement, ...], pool: _Pool) -> _Target | str:
        key = (pool.index, variant, c.zone_pin, None, c.rep.host_ports)  # taints: the policy decides
        t = self.target_cache.get(key)
        if t is None:
            t = self.target_cache[key] = self._target(c, variant, pool, taints=False)
        return t

    def _spread_every(self, c: _Class, tsc: TopologySpreadConstraint) -> set[str]:
        """Every domain the skew is measured over: those of the NodePools and nodes the node policies
        admit, whether or not this pod may go there (a volume pinned to one zone does not remove the
        others from the skew, as in kube-scheduler)."""
        required = self._required(c) if tsc.node_affinity_policy == "Honor" else ()
        out: set[str] = set()
        for pool in self.pools:
            if tsc.node_taints_policy == "Honor" and tolerates_all(c.rep.tolerations, pool.pool.taints):
                continue
            t = self._pool_target(c, required, pool)
            if not isinstance(t, str):
                out |= self._values(t, tsc.topology_key) or set()
        label = _label(tsc.topology_key)
        for n in self.existing:
            if n.labels.get(label) is not None and self._spread_node(c, n, tsc):
                out.add(n.labels[label])
        return out

    def _spread_node(self, c: _Class, n: _Node, tsc: TopologySpreadConstraint) -> bool:
        """Whether an existing node is a domain of ``tsc`` (nodeAffinityPolicy, nodeTaintsPolicy)."""
        if tsc.node_affinity_policy == "Honor" and not self._node_ok(c, n, self._required(c), taints=False):
            return False
        return tsc.node_taints_policy == "Ignore" or not tolerates_all(c.rep.tolerations, n.taints)

    def _launchable(self, t: _Target, c: _Class) -> bool:
        """Whether the NodePool can still launch a node for ``c`` (not at its limits)."""
        limits = t.pool.pool.limits
        if not limits:
            return True
        return any(all(t.pool.usage.get(k, 0) + x.capacity.get(k, 0) <= v for k, v in limits.items())
                   for x in t.types if _le(c.req, x.alloc))

    def _usable(self, c: _Class, key: str) -> tuple[set[str], dict[str, int]]:
        """The domains ``c`` can be placed in and, for those no NodePool can launch in, how many of its
        pods the existing nodes there still take (domains absent from the map are unbounded)."""
        launch: set[str] = set()
        for t in c.targets:
            if self._launchable(t, c):
                launch |= self._values(t, key) or set()
        room: dict[str, int] = defaultdict(int)
        label = _label(key)
        for n in self.existing:
            v = n.labels.get(label)
            if v is None or v in launch or not self._node_ok(c, n, c.variant) or self._conflict(c, n):
                continue
            room[v] += max(0, min(_fit(n.free, c.req), self._node_cap(c, n)))
        if c.zone_pin is not None and key in ZONE_KEYS:
            launch &= c.zone_pin
            room = defaultdict(int, {z: k for z, k in room.items() if z in c.zone_pin})
        usable = launch | {v for v, k in room.items() if k > 0}
        return usable, {v: k for v, k in room.items() if v not in launch}

    def _matching_counts(self, c: _Class, selector: Selector, key: str, *, namespaces: tuple[str, ...] = (),
                         spread: TopologySpreadConstraint | None = None) -> dict[str, int]:
        """Pods matching ``selector`` per domain of ``key``: bound ones plus those this plan has put in
        a domain already. For a spread constraint only nodes its node policies admit count."""
        counts: dict[str, int] = defaultdict(int)
        label = _label(key)
        for n in self.existing:
            value = n.labels.get(label)
            if value is None or (spread is not None and not self._spread_node(c, n, spread)):
                continue
            for p in n.bound:
                if _selects(selector, owner_ns=c.rep.namespace, pod=p, namespaces=namespaces):
                    counts[value] += 1
        for d in self.classes:
            placed = d.zone_counts if label == ZONE_LABEL else d.domain_counts.get(label)
            if placed and _selects(selector, owner_ns=c.rep.namespace, pod=d, namespaces=namespaces):
                for v, k in placed.items():
                    counts[v] += k
        return counts

    def _cheapest_zone(self, c: _Class, domains: set[str]) -> str:
        best: tuple[float, str] = (_INF, min(domains))
        for t in c.targets:
            for ty in t.types[:20]:
                for z in domains & t.zones:
                    best = min(best, (_sizing_price(ty, frozenset({z}), t.cts), z))
        return best[1]

    def _banned_by_others(self, c: _Class, key: str) -> set[str]:
        """Domains of ``key`` holding pods whose required anti-affinity on ``key`` selects ``c``
        (anti-affinity is symmetric): bound pods and pods this plan has already put in a domain."""
        label = _label(key)
        out: set[str] = set()
        for n, p in self.bound_anti or ():
            v = n.labels.get(label)
            if v is not None and any(_label(t.topology_key) == label and _selects(t, owner_ns=p.namespace, pod=c)
                                     for t in self._hard_anti(p)):
                out.add(v)
        for d in self.classes:
            placed = d.zone_counts if label == ZONE_LABEL else d.domain_counts.get(label)
            if placed and any(_label(t.topology_key) == label and _selects(t, owner_ns=d.rep.namespace, pod=c)
                              for t in self._hard_anti(d.rep)):
                out |= {v for v, k in placed.items() if k}
        return out

    # --- order -----------------------------------------------------------------------------------------

    def _affinity_order(self, order: list[_Class]) -> list[_Class]:
        """``order`` changed only as far as needed for each class to come after the classes its pod
        affinity selects, so their domains are decided first. Also records which classes others follow
        or avoid (``host_targets``: onto their nodes; ``pinned``: into one zone or one value of another
        key)."""
        deps: dict[int, list[_Class]] = defaultdict(list)
        live = [c for c in order if c.error is None]
        with_terms = [c for c in live if c.rep.pod_affinity or c.rep.pod_anti_affinity]
        for a in with_terms:
            for d in live:
                if d is a:
                    continue
                for t in a.rep.pod_affinity:
                    if _selects(t, owner_ns=a.rep.namespace, pod=d):
                        deps[a.id].append(d)
                        if t.topology_key == HOSTNAME_LABEL:
                            self.host_targets.add(d.id)
                        else:
                            self.pinned.setdefault(d.id, set()).add(_label(t.topology_key))
                for t in a.rep.pod_anti_affinity:
                    # No order: whichever of the two comes first is pinned to a domain, the other avoids it
                    # (anti-affinity is checked both ways).
                    if t.topology_key != HOSTNAME_LABEL and _selects(t, owner_ns=a.rep.namespace, pod=d):
                        self.pinned.setdefault(a.id, set()).add(_label(t.topology_key))
                        self.pinned.setdefault(d.id, set()).add(_label(t.topology_key))
        if self.bound_anti is None:
            self.bound_anti = [(n, p) for n in self.existing for p in n.bound if p.pod_anti_affinity]
        for _n, p in self.bound_anti:  # bound pods' anti-affinity on other keys: the pods it selects take a value
            for t in self._hard_anti(p):
                if is_generic(t.topology_key):
                    for d in live:
                        if _selects(t, owner_ns=p.namespace, pod=d):
                            self.pinned.setdefault(d.id, set()).add(t.topology_key)
        if not deps:
            return order
        out: list[_Class] = []
        state: dict[int, int] = {}  # 1 visiting, 2 done
        for root in order:
            if state.get(root.id):
                continue
            stack: list[tuple[_Class, Iterable[_Class]]] = [(root, iter(deps.get(root.id, ())))]
            state[root.id] = 1
            while stack:
                c, it = stack[-1]
                nxt = next((d for d in it if not state.get(d.id)), None)
                if nxt is None:
                    stack.pop()
                    state[c.id] = 2
                    out.append(c)
                else:
                    state[nxt.id] = 1
                    stack.append((nxt, iter(deps.get(nxt.id, ()))))
        return out

    # --- splitting a class over the values of a key -----------------------------------------------------

    def _generic_key(self, c: _Class) -> str | None:
        """The first key other than zone, capacity type and hostname that ``c`` still has to be split on."""
        for t in c.rep.topology_spread:
            if is_generic(t.topology_key, spread=True) and t.topology_key not in c.handled and (
                    _selects(t.label_selector, owner_ns=c.rep.namespace, pod=c)):
                return t.topology_key
        for term in (*c.rep.pod_affinity, *c.rep.pod_anti_affinity):
            if is_generic(term.topology_key) and term.topology_key not in c.handled:
                return term.topology_key
        for key in self.pinned.get(c.id, ()):
            if is_generic(key) and key not in c.handled:
                return key
        return None

    def _split(self, c: _Class, key: str) -> list[_Class]:
        """Split ``c`` per value of ``key`` as its spread, affinity and anti-affinity on that key (and
        other classes' anti-affinity towards it) decide; children carry ``key In [value]``. Pods that
        fit nowhere are reported. Returns the children still to place."""
        pinned_keys = {k for n in self.existing for k in n.pinned.get(c.id, ())}
        rest = [p for p in c.pods if p.key not in pinned_keys]
        c.pods = [p for p in c.pods if p.key in pinned_keys]
        n = len(rest)
        usable, room = self._usable(c, key)
        banned = self._banned_by_others(c, key)
        usable -= banned
        reason = (f"pod anti-affinity on {key}: every value of {key} it may use holds a pod whose anti-affinity "
                  "excludes it") if banned and not usable else ""
        own = any(t.topology_key == key for t in (*c.rep.pod_affinity, *c.rep.pod_anti_affinity))
        spreads = [t for t in c.rep.topology_spread if t.topology_key == key and is_generic(key, spread=True)
                   and _selects(t.label_selector, owner_ns=c.rep.namespace, pod=c)]
        if not usable and not own and not spreads and not banned:
            child = self._child(c, rest, key, None)  # only followed by others, with no value to pin it to
            c.domain_counts = self._counts_for(c, len(c.pods))
            return [] if self._resolve_child(child) else [child]
        for term in c.rep.pod_anti_affinity:
            if term.topology_key != key:
                continue
            counts = self._matching_counts(c, term, key, namespaces=term.namespaces)
            usable = {v for v in usable if not counts.get(v)}
            if _selects(term, owner_ns=c.rep.namespace, pod=c):
                room = {v: min(room.get(v, 1), 1) for v in usable}
        for term in c.rep.pod_affinity:
            if term.topology_key != key:
                continue
            counts = self._matching_counts(c, term, key, namespaces=term.namespaces)
            have = sorted((v for v in usable if counts.get(v)), key=lambda v: (-counts[v], v))
            if have:
                usable = {have[0]}
            elif not _selects(term, owner_ns=c.rep.namespace, pod=c):
                usable = set()
                reason = f"pod affinity on {key}: no pod matches its required podAffinity"
            elif usable:
                usable = {min(usable)}
        got: dict[str, int] = {}
        over = n
        if not usable:
            reason = reason or (f"topology spread on {key}: no NodePool or node it may use has label {key}"
                                if spreads else f"pod (anti-)affinity on {key}: every value of {key} it may "
                                "use is excluded")
        elif spreads:
            tsc = spreads[0]
            every = self._spread_every(c, tsc) | usable
            counts = self._matching_counts(c, tsc.label_selector, key, spread=tsc)
            hard = tsc.when_unsatisfiable == "DoNotSchedule"
            min_zero = hard and tsc.min_domains is not None and len(every) < tsc.min_domains
            got, over = _spread(usable, every, counts, n, max_skew=tsc.max_skew, min_zero=min_zero, room=room)
            if over and not hard:
                extra = _water_fill(usable, {v: counts.get(v, 0) + got.get(v, 0) for v in usable}, over,
                                    room={v: r - got.get(v, 0) for v, r in room.items()})
                for v, k in extra.items():
                    got[v] = got.get(v, 0) + k
                over = n - sum(got.values())
            reason = f"topology spread on {key}: maxSkew {tsc.max_skew} would be exceeded in every domain it may use"
        else:
            # Affinity / anti-affinity only: one value for all (affinity left one), one pod per value
            # for self anti-affinity, else values in order.
            self_anti = any(t.topology_key == key and _selects(t, owner_ns=c.rep.namespace, pod=c)
                            for t in c.rep.pod_anti_affinity)
            if not self_anti and not any(t.topology_key == key for t in c.rep.pod_anti_affinity):
                usable = {min(usable)}  # a follower's target, or affinity: all in one domain
            for v in sorted(usable):
                k = min(over, 1 if self_anti else room.get(v, UNBOUNDED))
                if k > 0:
                    got[v] = k
                    over -= k
                if not over:
                    break
            reason = reason or (f"pod anti-affinity on {key}: every value of {key} it may use already has a "
                                "matching pod")
        children: list[_Class] = []
        start = 0
        for v, k in sorted(got.items()):
            if k <= 0:
                continue
            children.append(self._child(c, rest[start:start + k], key, v))
            start += k
        if start < n:
            left = self._child(c, rest[start:], key, None)
            left.domain_counts = {}  # placed nowhere
            self._unschedulable(left, len(left.pods), reason)
        c.domain_counts = self._counts_for(c, len(c.pods))
        return [ch for ch in children if not self._resolve_child(ch)]

    def _child(self, c: _Class, pods: list[Pod], key: str, value: str | None) -> _Class:
        extra = (Requirement(key, "In", (value,)),) if value is not None else ()
        handled = c.handled | {key} if key else c.handled
        child = replace(c, id=len(self.classes), pods=pods, placed=0, targets=[], conflicts=set(c.conflicts),
                        variants=[c.variant + extra], required_variants=list(c.required_variants),
                        handled=handled, zone_counts={}, host_spread=list(c.host_spread),
                        domain_counts=self._counts_for(c, len(pods)))
        if value is not None:
            child.domain_counts[key] = {value: len(pods)}
        self.classes.append(child)
        if c.id in c.conflicts:
            child.conflicts.add(child.id)
        for d in self.classes:
            if c.id in d.conflicts:
                d.conflicts.add(child.id)
            d.host_spread = [(s, ids | {child.id} if c.id in ids else ids, t) for s, ids, t in d.host_spread]
        if c.id in self.host_targets:
            self.host_targets.add(child.id)
        if c.id in self.pinned:
            self.pinned[child.id] = set(self.pinned[c.id])
        return child

    def _relax(self, c: _Class, count: int) -> bool:
        """Hand ``count`` of ``c``'s pods that a topology spread cannot place to a child that gives up
        its heaviest remaining preferred node affinity (Karpenter relaxes a pod that fails); False when
        ``c`` has no preference left to give up."""
        idx = c.variants.index(c.variant) if c.variant in c.variants else len(c.variants)
        if idx + 1 >= len(c.variants) or count > len(c.pods) - c.placed:
            return False
        moved, c.pods = c.pods[len(c.pods) - count:], c.pods[:len(c.pods) - count]
        child = self._child(c, moved, "", None)
        child.domain_counts = self._counts_for(c, len(moved))
        c.domain_counts = self._counts_for(c, len(c.pods))
        child.variants, child.handled = c.variants[idx + 1:], c.handled
        if not self._resolve_child(child):
            self.requeue.append(child)
        return True

    @staticmethod
    def _counts_for(c: _Class, n: int) -> dict[str, dict[str, int]]:
        """``c``'s values on the keys it was split on (one each), counting ``n`` pods."""
        return {k: dict.fromkeys(vals, n) for k, vals in c.domain_counts.items() if n}

    def _resolve_child(self, child: _Class) -> bool:
        """Resolve a child's NodePool targets; report its pods when none fits (True)."""
        error = self._resolve(child)
        if error is not None:
            self._unschedulable(child, len(child.pods), error)
            return True
        return False

    def _split_all(self, queue: deque[_Class]) -> None:
        """Replace the head of ``queue`` by its children while it has a key to be split on."""
        while queue:
            c = queue[0]
            key = self._generic_key(c) if c.error is None else None
            if key is None:
                return
            queue.popleft()
            queue.extendleft(reversed(self._split(c, key)))
