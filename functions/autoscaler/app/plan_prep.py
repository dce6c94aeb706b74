"""What a warm provisioner container keeps between passes so a woken pass plans in time that grows with
what changed, not with the cluster: the bound pods of every node with their summed requests, updated by the
pods that changed since the last pass, and the last NodePool table (``domain/scheduling/prepared.py``).

Pods are compared by identity: the warm cluster cache (``adapters/kube/informer.py``) keeps an unchanged
pod as the same parsed object and replaces the object of a pod that changed, so a pod object seen at the
last pass is unchanged (objects are frozen). Anything else — a cold list, new objects for the same pods —
is only slower, never different: the index is rebuilt when most pods are new."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from autoscaler.domain import resources as res
from autoscaler.domain.models import Pod
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling.prepared import (
    BoundPods,
    NodeLoad,
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
    """``BoundPods`` of the latest pod list, updated by the pods whose object changed."""

    def __init__(self) -> None:
        self._seen: dict[int, Pod] = {}  # id -> pod of the last list (held, so an id is not reused meanwhile)
        self._on: dict[str, dict[int, Pod]] = {}  # node -> its bound, unfinished pods by id
        self._load: dict[str, NodeLoad] = {}
        self.rebuilds = 0  # how many times the index was built from scratch (for tests)

    def index(self, pods: Sequence[Pod]) -> BoundPods:
        seen = {id(p): p for p in pods}
        added = seen.keys() - self._seen.keys()
        removed = self._seen.keys() - seen.keys()
        if not self._seen or len(added) + len(removed) > REBUILD_SHARE * max(len(seen), 1):
            return self._rebuild(pods, seen)
        touched: set[str] = set()
        for i in removed:
            p = self._seen[i]
            if p.node_name and not p.is_finished:
                self._on.get(p.node_name, {}).pop(i, None)
                touched.add(p.node_name)
        for i in added:
            p = seen[i]
            if p.node_name and not p.is_finished:
                self._on.setdefault(p.node_name, {})[i] = p
                touched.add(p.node_name)
        for name in touched:
            on = self._on.get(name)
            if on:
                self._load[name] = (tuple(on.values()), res.total(p.requests for p in on.values()))
            else:
                self._on.pop(name, None)
                self._load.pop(name, None)
        self._seen = seen
        return BoundPods(pods, dict(self._load))

    def _rebuild(self, pods: Sequence[Pod], seen: dict[int, Pod]) -> BoundPods:
        self.rebuilds += 1
        fresh = bound_pods(pods)
        self._seen = seen
        self._load = dict(fresh.by_node)
        self._on = {name: {id(p): p for p in on} for name, (on, _) in fresh.by_node.items()}
        return fresh


class PlanPrep:
    """The provisioner's warm planning inputs, one per container."""

    def __init__(self) -> None:
        self.bound = BoundPodIndex()
        self._pools: PoolTable | None = None

    def prepare(self, snap: PlanInput, unavailable: Collection[tuple[str, str, str]]) -> Prepared:
        self._pools = pool_table(snap, unavailable, plan_keys(pending_pods(snap)), previous=self._pools)
        return Prepared(bound=self.bound.index(snap.pods), pools=self._pools)
