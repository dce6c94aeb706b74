"""What a warm provisioner container keeps between passes so a woken pass plans in time that grows with
what changed, not with the cluster: the bound pods of every node with their summed requests, updated by the
pods that changed since the last pass, and the last NodePool table (``domain/scheduling/prepared.py``).

Pods are compared by identity: the warm cluster cache (``adapters/kube/informer.py``) keeps an unchanged
pod as the same parsed object and replaces the object of a pod that changed, so a pod object seen at the
last pass is unchanged (objects are frozen). Anything else — a cold list, new objects for the same pods —
is only slower, never different: the index is rebuilt when most pods are new."""

from __future__ import annotations

import operator
import weakref
from collections.abc import Collection, Sequence
from typing import cast

from autoscaler.domain import resources as res
from autoscaler.domain.models import Pod
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling.prepared import (
    BoundPods,
    PoolTable,
    Prepared,
    bound_pods,
    pending_pods,
    plan_keys,
    pool_table,
)

# Above this share of changed pods, rebuilding the index from scratch is cheaper than updating it.
REBUILD_SHARE = 0.5


class BoundPodIndex:
    """``BoundPods`` of the latest pod list, updated by the pods whose object changed.

    It refers to the pods it has seen weakly: a cold list (the warm cache lists again, dropping its old
    objects first) must not find the last list's 25,000 pods kept alive here. A pod of the last list that
    has died since was removed or replaced; its id may already name a new pod, so it is handled as removed
    (the weak reference's callback records it) and the new pod as added."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Pod]] = {}  # id -> the pod of the last list
        self._dead: set[int] = set()  # ids of pods of the last list that died since
        self._node_of: dict[int, str] = {}  # id -> the node a bound, unfinished pod was counted on
        self._on: dict[str, dict[int, weakref.ref[Pod]]] = {}  # node -> its bound, unfinished pods
        self._sums: dict[str, res.Resources] = {}  # node -> their summed requests
        self._tuples: dict[str, tuple[weakref.ref[Pod], ...]] = {}  # node -> ``_on[node]``'s references
        self.rebuilds = 0  # how many times the index was built from scratch (for tests)

    def _ref(self, p: Pod) -> weakref.ref[Pod]:
        i = id(p)

        def died(_: weakref.ref[Pod]) -> None:
            self._dead.add(i)

        return weakref.ref(p, died)

    def index(self, pods: Sequence[Pod]) -> BoundPods:
        now = set(map(id, pods))
        before = self._refs.keys()
        dead, self._dead = self._dead, set()
        removed = (before - now) | (dead & before)
        added = now - (before - removed)
        if not self._refs or len(removed) + len(added) > REBUILD_SHARE * max(len(now), 1):
            return self._rebuild(pods)
        touched: set[str] = set()
        for i in removed:
            del self._refs[i]
            node = self._node_of.pop(i, None)
            if node is not None:
                del self._on[node][i]
                touched.add(node)
        for p in (p for p in pods if id(p) in added) if added else ():
            i = id(p)
            self._refs[i] = ref = self._ref(p)
            if p.node_name and not p.is_finished:
                self._on.setdefault(p.node_name, {})[i] = ref
                self._node_of[i] = p.node_name
                touched.add(p.node_name)
        for node in touched:
            on = self._on.get(node)
            if on:
                self._sums[node] = res.total(p.requests for p in cast(list[Pod], list(map(operator.call, on.values()))))
            else:
                self._on.pop(node, None)
                self._sums.pop(node, None)
        for node in touched:
            if node in self._on:
                self._tuples[node] = tuple(self._on[node].values())
            else:
                self._tuples.pop(node, None)
        # Every pod referred to is in ``pods`` (the dead ones were removed above), so alive; calling the
        # references through map() keeps this per-pod step out of Python bytecode.
        return BoundPods(pods, {node: (cast(tuple[Pod, ...], tuple(map(operator.call, refs))), self._sums[node])
                                for node, refs in self._tuples.items()})

    def _rebuild(self, pods: Sequence[Pod]) -> BoundPods:
        self.rebuilds += 1
        fresh = bound_pods(pods)
        self._refs = {id(p): self._ref(p) for p in pods}
        self._on = {node: {id(p): self._refs[id(p)] for p in on} for node, (on, _) in fresh.by_node.items()}
        self._node_of = {i: node for node, on in self._on.items() for i in on}
        self._sums = {node: total for node, (_, total) in fresh.by_node.items()}
        self._tuples = {node: tuple(on.values()) for node, on in self._on.items()}
        self._dead = set()
        return fresh


class PlanPrep:
    """The provisioner's warm planning inputs, one per container."""

    def __init__(self) -> None:
        self.bound = BoundPodIndex()
        self._pools: PoolTable | None = None

    def prepare(self, snap: PlanInput, unavailable: Collection[tuple[str, str, str]]) -> Prepared:
        self._pools = pool_table(snap, unavailable, plan_keys(pending_pods(snap)), previous=self._pools)
        return Prepared(bound=self.bound.index(snap.pods), pools=self._pools)
