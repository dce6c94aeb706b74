"""What keeps a node from voluntary disruption: PodDisruptionBudgets (the eviction API's arithmetic), the
``karpenter.sh/do-not-disrupt`` annotation and pods without a controller."""

from __future__ import annotations

import math
from collections.abc import Iterable

from autoscaler.domain.disruption.model import Guard, Settings, annotated_true, moves
from autoscaler.domain.keys import DO_NOT_DISRUPT
from autoscaler.domain.models import Node, Pod, PodDisruptionBudget

# --- PodDisruptionBudgets --------------------------------------------------------------------------

def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    if value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)  # the API server rounds percentages up
    return int(value)


def pdb_selects(pdb: PodDisruptionBudget, pod: Pod) -> bool:
    return pdb.namespace == pod.namespace and pdb.selector is not None and pdb.selector.matches(pod.labels)


def disruptions_allowed(pdb: PodDisruptionBudget, pods: Iterable[Pod]) -> tuple[int, int, int]:
    """(disruptionsAllowed, currentHealthy, desiredHealthy) by the disruption controller's arithmetic."""
    live = [p for p in pods if pdb_selects(pdb, p) and not p.is_finished]
    expected = len(live)
    healthy = sum(1 for p in live if p.ready and not p.deleting)
    if pdb.max_unavailable is not None:
        desired = max(0, expected - _scaled(pdb.max_unavailable, expected))
    elif pdb.min_available is not None:
        desired = _scaled(pdb.min_available, expected)
    else:
        desired = expected
    return max(0, healthy - desired), healthy, desired


def pdb_problem(pod: Pod, pdbs: Iterable[PodDisruptionBudget], all_pods: list[Pod]) -> str | None:
    """Why evicting ``pod`` would be refused now, or None (the API server's eviction rules)."""
    matching = [b for b in pdbs if pdb_selects(b, pod)]
    if not matching or pod.phase in ("Pending", "Succeeded", "Failed"):
        return None
    if len(matching) > 1:
        return f"pod {pod.key} is selected by more than one PDB ({', '.join(b.name for b in matching)})"
    budget = matching[0]
    allowed, healthy, desired = disruptions_allowed(budget, all_pods)
    if not pod.ready and healthy >= desired > 0:
        return None  # unhealthy pods may go while the budget is met
    if allowed <= 0:
        return (f"PDB {budget.namespace}/{budget.name} allows no disruption of pod {pod.key} "
                f"({healthy} healthy, {desired} needed)")
    return None


# --- guards ------------------------------------------------------------------------------------------

def guard_for(node: Node, pods: list[Pod], *, pdbs: list[PodDisruptionBudget], all_pods: list[Pod],
              settings: Settings) -> tuple[Guard, str] | None:
    """The first guard that keeps ``node`` (with its ``pods``) from voluntary disruption, or None."""
    if annotated_true(node.annotations, DO_NOT_DISRUPT):
        return "DoNotDisrupt", f"node {node.name} has annotation {DO_NOT_DISRUPT}=true"
    moving = [p for p in pods if moves(p)]
    for p in moving:
        if annotated_true(p.annotations, DO_NOT_DISRUPT):
            return "DoNotDisrupt", f"pod {p.key} has annotation {DO_NOT_DISRUPT}=true"
    if not settings.allow_bare_pods:
        for p in moving:
            if p.owner is None:
                return "BarePod", f"pod {p.key} has no controller and would not come back after eviction"
    for p in moving:
        problem = pdb_problem(p, pdbs, all_pods)
        if problem:
            return "PDB", problem
    return None


