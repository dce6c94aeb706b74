"""What happens to the pods of nodes that leave: the planner run on the cluster without them (registered
capacity only), telling whether they fit elsewhere, need launches, or fit nowhere."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from autoscaler.domain.disruption.model import moves
from autoscaler.domain.models import Offering
from autoscaler.domain.plan import Launch, PlanInput
from autoscaler.domain.scheduling import plan

# --- simulation ------------------------------------------------------------------------------------

def without(snapshot: PlanInput, leaving: Collection[str]) -> PlanInput:
    """The snapshot as the planner should see it with ``leaving`` gone: their moving pods pending
    again, other pending pods and in-flight instances left out (consolidation counts on registered
    capacity only, and pending pods are the provisioner's)."""
    gone = set(leaving)
    pods = []
    for p in snapshot.pods:
        if p.node_name in gone:
            if moves(p):
                pods.append(replace(p, node_name=None, phase="Pending", ready=False))
        elif not p.is_pending:
            pods.append(p)
    return replace(snapshot, pods=pods, nodes=[n for n in snapshot.nodes if n.name not in gone], in_flight=[])


def cheapest_prices(offerings: Iterable[Offering], launch: Launch) -> dict[str, float]:
    out: dict[str, float] = {}
    zones = set(launch.zones)
    for o in offerings:
        if o.capacity_type == launch.capacity_type and o.available and (not zones or o.zone in zones):
            out[o.instance_type] = min(o.price, out.get(o.instance_type, math.inf))
    return out


@dataclass(frozen=True, slots=True)
class Simulation:
    pods: tuple[str, ...]
    launches: tuple[Launch, ...]
    unschedulable: tuple[str, ...]

    @property
    def fits(self) -> bool:
        """Everything moves onto registered nodes with no launch."""
        return not self.launches and not self.unschedulable


def simulate(snapshot: PlanInput, leaving: Collection[str]) -> Simulation:
    """Where the pods of ``leaving`` would go: existing nodes, new launches, or nowhere."""
    sim = without(snapshot, leaving)
    result = plan(sim)
    moving = tuple(sorted(p.key for p in sim.pods if p.is_pending))
    return Simulation(moving, tuple(result.launches), tuple(u.pod for u in result.unschedulable))


