"""Disruption decisions: which of the autoscaler's nodes to remove or replace now, and why not the others.

Pure: it reads a ``PlanInput`` (nodes, pods, NodePools, offerings), the PodDisruptionBudgets, the clock
reading, the node annotations the disruption service maintains and, for drift, the instances and what
each EC2NodeClass resolves to, and answers with ``Candidate`` s and ``Blocked`` entries. One module per
method, as Karpenter has (see docs/disruption.md for the semantics and the differences):

- ``repair``: unhealthy nodes past their tolerations, forcefully, paused above 20 % unhealthy;
- ``static``: the excess of a static NodePool whose ``replicas`` was lowered;
- ``consolidation``: Empty and Underutilized (multi-node, single-node, spot-to-spot rule);
- ``expiration``: older than ``expireAfter``;
- ``drift``: NodePool / EC2NodeClass hash, AMI, subnet, security groups, requirements;
- ``guards`` (PDBs, ``do-not-disrupt``, bare pods), ``budgets``, ``simulation``; ``decide`` runs them.
"""

from autoscaler.domain.disruption.budgets import Budgets, allowed_disruptions, budget_active
from autoscaler.domain.disruption.consolidation import consolidation
from autoscaler.domain.disruption.decide import decide
from autoscaler.domain.disruption.guards import disruptions_allowed, guard_for, pdb_problem, pdb_selects
from autoscaler.domain.disruption.model import (
    DRAIN_REASONS,
    MIN_SPOT_TO_SPOT_TYPES,
    REASON_OF_DRAIN,
    Blocked,
    Candidate,
    CandidateAction,
    Decision,
    DisruptionInput,
    Guard,
    Reason,
    Settings,
    annotated_true,
    in_progress,
    is_ours,
    moves,
    node_price,
    pods_by_node,
)
from autoscaler.domain.disruption.simulation import Simulation, simulate, without

__all__ = [
    "DRAIN_REASONS", "MIN_SPOT_TO_SPOT_TYPES", "REASON_OF_DRAIN", "Blocked", "Budgets", "Candidate",
    "CandidateAction", "Decision", "DisruptionInput", "Guard", "Reason", "Settings", "Simulation",
    "allowed_disruptions", "annotated_true", "budget_active", "consolidation", "decide", "disruptions_allowed",
    "guard_for", "in_progress", "is_ours", "moves", "node_price", "pdb_problem", "pdb_selects", "pods_by_node",
    "simulate", "without",
]
