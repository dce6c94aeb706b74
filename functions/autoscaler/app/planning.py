"""What a provisioner pass decides from its input, the one path ``autoscaler plan`` takes too
(docs/snapshot.md): the plan with reserved capacity first, then the template nodes static NodePools are
short of. Its input is ``domain/initialization.capacity_view`` of what the pass read (or of the snapshot)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from autoscaler.domain.plan import Plan, PlanInput
from autoscaler.domain.scheduling import plan_reserved_first
from autoscaler.domain.scheduling.prepared import Prepared
from autoscaler.domain.static_pools import static_launches

log = logging.getLogger("autoscaler.app.provisioner")


def decide(snap: PlanInput, *, unavailable: Collection[tuple[str, str, str]] = (),
           timer: Callable[[], float] | None = None, prepared: Prepared | None = None) -> Plan:
    """The pass's plan: placements, new nodes (the static pools' template nodes among them) and the
    unschedulable pods. A static pool that is short and cannot launch is logged with the reason."""
    plan = plan_reserved_first(snap, unavailable=unavailable, timer=timer, prepared=prepared)
    fixed, short = static_launches(snap, snap.node_pools)
    plan.launches.extend(fixed)
    for problem in short:
        log.warning("%s", problem)
    return plan
