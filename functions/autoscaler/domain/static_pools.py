"""Static NodePools (``spec.replicas``, Karpenter v1.x): a fixed number of nodes whatever the pods.

The planner never launches for pods into a static pool; instead each provisioner pass launches what the
pool is short of (``static_launches``): ``replicas`` minus its nodes that are not leaving (deleting,
disrupted, awaiting replacement) and its in-flight launches, never taking the pool past ``limits.nodes``
(counting every node of it, leaving ones too, as Karpenter's node-count reservation does). A launch is
one node from the pool's template: every instance type its requirements and node class allow, cheapest
first, on the first capacity type the pool allows (spot before on-demand, as the planner prefers).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, NODEPOOL_LABEL, WELL_KNOWN_KEYS, ZONE_KEYS, ZONE_LABEL
from autoscaler.domain.labels import instance_type_labels
from autoscaler.domain.models import DISRUPTED_TAINT, Node
from autoscaler.domain.node_state import read_state
from autoscaler.domain.nodepool import NodePool, requirement_allows
from autoscaler.domain.plan import Launch, PlanInput

MAX_TYPES = 60  # as many as the planner offers EC2 for one node


def leaving(node: Node) -> bool:
    """A node that will not stay: deleting, being disrupted, or awaiting its replacement."""
    return (node.deleting or read_state(node.annotations).in_progress
            or any(t.key == DISRUPTED_TAINT.key and t.effect == DISRUPTED_TAINT.effect for t in node.taints))


@dataclass(frozen=True, slots=True)
class StaticCount:
    staying: int  # registered nodes that are not leaving, plus in-flight launches
    total: int  # every node and in-flight launch of the pool (what limits.nodes caps)

    def shortfall(self, pool: NodePool) -> int:
        want = (pool.replicas or 0) - self.staying
        room = pool.limits.get("nodes")
        if room is not None:
            want = min(want, room - self.total)
        return max(0, want)


def count(pool: NodePool, snap: PlanInput, *, extra_leaving: Collection[str] = ()) -> StaticCount:
    nodes = [n for n in snap.nodes if n.labels.get(NODEPOOL_LABEL) == pool.name and not n.deleting]
    registered = {n.instance_id for n in snap.nodes if n.instance_id}
    flying = sum(1 for f in snap.in_flight if f.node_pool == pool.name and f.instance_id not in registered)
    staying = sum(1 for n in nodes if not leaving(n) and n.name not in extra_leaving)
    return StaticCount(staying=staying + flying, total=len(nodes) + flying)


def template_launch(pool: NodePool, snap: PlanInput) -> Launch | None:
    """One node from ``pool``'s template, or None when no offering satisfies it."""
    type_reqs = [r for r in pool.requirements if r.key in WELL_KNOWN_KEYS and r.key not in ZONE_KEYS
                 and r.key not in (CAPACITY_TYPE_LABEL, NODEPOOL_LABEL)]
    zone_reqs = [r for r in pool.requirements if r.key in ZONE_KEYS]
    subnet_zones = snap.node_class_zones.get(pool.node_class_ref)
    allowed = {it.name for it in snap.instance_types
               if all(requirement_allows(r, instance_type_labels(it).get(r.key)) for r in type_reqs)}
    for ct in pool.capacity_types:
        best: dict[str, float] = {}
        zones: set[str] = set()
        for o in snap.offerings:
            if (o.capacity_type != ct or not o.available or o.instance_type not in allowed
                    or (subnet_zones is not None and o.zone not in subnet_zones)
                    or not all(requirement_allows(r, o.zone) for r in zone_reqs)):
                continue
            best[o.instance_type] = min(o.price, best.get(o.instance_type, o.price))
            zones.add(o.zone)
        if not best:
            continue
        types = tuple(sorted(best, key=lambda t: (best[t], t))[:MAX_TYPES])
        labels = {**{r.key: r.values[0] for r in pool.requirements if r.operator == "In" and len(r.values) == 1},
                  **pool.labels, NODEPOOL_LABEL: pool.name, CAPACITY_TYPE_LABEL: ct}
        if len(zones) != 1:
            labels.pop(ZONE_LABEL, None)
        return Launch(node_pool=pool.name, node_class=pool.node_class_ref, capacity_type=ct,
                      zones=tuple(sorted(zones)), instance_types=types, pods=(), labels=labels, taints=pool.taints,
                      startup_taints=pool.startup_taints, hourly_price=best[types[0]],
                      capacity_types=pool.capacity_types)
    return None


def static_launches(snap: PlanInput, pools: Iterable[NodePool]) -> tuple[list[Launch], list[str]]:
    """The template nodes each static pool is short of, and why a short pool launches nothing."""
    launches: list[Launch] = []
    problems: list[str] = []
    for pool in pools:
        if not pool.is_static:
            continue
        short = count(pool, snap).shortfall(pool)
        if not short:
            continue
        launch = template_launch(pool, snap)
        if launch is None:
            problems.append(f"NodePool {pool.name}: no available offering satisfies its requirements "
                            f"({short} of {pool.replicas} replicas missing)")
            continue
        launches.extend([launch] * short)
    return launches, problems
