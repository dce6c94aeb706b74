"""The scheduling core: which pending pods go on existing capacity, which new nodes to launch, and why
the rest cannot be placed.

It works on equivalence classes, not pods: pods with the same requests, labels and constraints (the
replicas of one Deployment) are one class and are placed by arithmetic ("a node of type T fits k of
them"). The steps, in order:

1. Per NodePool, once: instance types allowed by its requirements, their offerings (minus the
   ``unavailable`` ones) and allocatable less the DaemonSet overhead that would land on such a node.
2. Per class: the first variant of its node requirements (Karpenter's order: the heaviest preferred
   term with each required term, then lighter ones, then none) that some NodePool or existing node
   satisfies; classes are placed after the classes their pod affinity follows (``topology.py``); zone
   and capacity-type spread decided as counts per domain over the domains the class can use; spread
   and pod (anti-)affinity on any other key split the class per value of that key.
3. In-flight instances take back the pods they were launched for; then existing nodes and in-flight
   instances are filled, then nodes already opened by this plan.
4. Classes that shape nodes (hostname anti-affinity, host ports, hostname spread, hostname affinity)
   open their nodes at once, each typed by its price plus the shadow cost of the share of other pods
   it cannot hold; the flexible classes fill those nodes balancing CPU and memory, and the rest is
   packed per (NodePool, requirements, zones, capacity types)
   group: a small LP over at most two instance types sizes the nodes, and each node takes a
   proportional share of every class, so node shapes follow the group's CPU:memory mix. The last
   fraction of a node goes on the type with the lowest price per unit of pods it actually takes, so
   a group's remainder fills small nodes well instead of one roomy node.
5. Each new node gets up to 60 instance types, cheapest first, that fit everything on it.

Where: 1 in ``prepared.py`` and ``node_pool_view.py``; 2 in ``instance_type_index.py`` (``resolve``),
``topology.py`` and ``class_splitter.py``; 3 and the shaped classes' nodes in ``scheduler.py`` (a fresh
``Scheduler`` per plan, composing the objects of the other modules; ``docs/architecture.md`` lists them);
4 in ``group_packer.py`` and ``node_mix.py``; 5 in ``plan_writer.py``.

Capacity reservations (``PlanInput.reservations``) are filled first by ``plan_reserved_first``
(``reserved.py``), which plans twice around ``plan``.

Preferred pod affinity and anti-affinity are taken as required; ``plan`` relaxes them, one term at a
time, for the pods a plan cannot place, and plans again.
"""

from __future__ import annotations

from autoscaler.domain.scheduling.planner import plan
from autoscaler.domain.scheduling.reserved import plan_reserved_first

__all__ = ["plan", "plan_reserved_first"]
