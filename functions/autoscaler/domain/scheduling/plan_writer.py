"""Writing the plan: pods reported late, the pods each existing node and new node takes (those an
in-flight instance was launched for by name), and each new node as a launch with up to
``MAX_INSTANCE_TYPES`` instance types, cheapest first, that fit everything on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from autoscaler.domain.plan import Launch, Plan, Unschedulable
from autoscaler.domain.scheduling.existing_node import ExistingNode
from autoscaler.domain.scheduling.group_packer import Late
from autoscaler.domain.scheduling.instance_type_index import InstanceTypeIndex
from autoscaler.domain.scheduling.new_node import NewNode
from autoscaler.domain.scheduling.pod_class import PodClass
from autoscaler.domain.scheduling.rejection import Criterion, Rejection
from autoscaler.domain.scheduling.requirements import MAX_INSTANCE_TYPES, single_values, with_min_values
from autoscaler.domain.scheduling.vector import fits_within

# (capacity type, zones, instance types, hourly price) of a launch, or why none can be made.
# The last item maps each other capacity type the pool allows to its fallback instance types.
LaunchChoice = tuple[str, tuple[str, ...], tuple[str, ...], float, Mapping[str, tuple[str, ...]]] | str


def write_plan(plan: Plan, *, classes: Sequence[PodClass], existing: Sequence[ExistingNode],
               new_nodes: Sequence[NewNode], late: Late, index: InstanceTypeIndex) -> None:
    for cls, count, reason in late:
        cls.reject(count, reason, plan.unschedulable)
    cursor = {cls.id: 0 for cls in classes}
    taken = {unplaced.pod for unplaced in plan.unschedulable}
    taken.update(key for node in existing for keys in node.pinned.values() for key in keys)
    available = {cls.id: [pod for pod in cls.pods if pod.key not in taken] for cls in classes}

    def pods_for(node: ExistingNode | NewNode) -> list[str]:
        keys: list[str] = []
        for class_id, count in node.classes.items():
            mine = node.pinned.get(class_id, ()) if isinstance(node, ExistingNode) else ()
            keys.extend(mine)
            start = cursor[class_id]
            keys.extend(pod.key for pod in available[class_id][start:start + count - len(mine)])
            cursor[class_id] = start + count - len(mine)
        return keys

    for node in existing:
        for key in pods_for(node):
            plan.existing[key] = node.name
    cache: dict[tuple[object, ...], LaunchChoice] = {}
    for new in new_nodes:
        keys = pods_for(new)
        if not keys:
            continue
        choice = _launch(new, cache, index)
        if isinstance(choice, str):
            plan.unschedulable.extend(Unschedulable(key, choice) for key in keys)
            continue
        capacity_type, zones, types, price, fallbacks = choice
        target = new.target
        pool = target.pool.pool
        labels = {**single_values(pool.requirements), **pool.labels, **target.labels, NODEPOOL_LABEL: pool.name,
                  CAPACITY_TYPE_LABEL: capacity_type}
        if len(zones) == 1:
            labels[ZONE_LABEL] = zones[0]
        else:
            labels.pop(ZONE_LABEL, None)
        plan.launches.append(Launch(
            node_pool=pool.name, node_class=target.pool.node_class, capacity_type=capacity_type, zones=zones,
            instance_types=types, pods=tuple(keys), labels=labels, taints=pool.taints,
            startup_taints=pool.startup_taints, hourly_price=price, capacity_types=pool.capacity_types,
            fallback_instance_types=fallbacks,
        ))


def _launch(node: NewNode, cache: dict[tuple[object, ...], LaunchChoice], index: InstanceTypeIndex) -> LaunchChoice:
    target = node.target
    pool = target.pool.pool
    key = (id(target), node.used, node.zones, node.capacity_types, node.allowed,
           id(node.pool_type) if pool.limits else None)
    hit = cache.get(key)
    if hit is not None:
        return hit
    no_fit = Rejection(pool.name, Criterion.NO_TYPE_FITS_TOGETHER).render()
    result: LaunchChoice = no_fit
    choices: list[tuple[str, tuple[str, ...], tuple[str, ...], float]] = []
    for capacity_type in ("spot", "on-demand"):
        if capacity_type not in node.capacity_types:
            continue
        choice = _choose(node, index, capacity_type)
        if isinstance(choice, str):
            if not choices and choice != no_fit:  # the more precise reason wins
                result = choice
            continue
        choices.append(choice)
    if choices:
        # The first capacity type with a choice is the plan; the others are the launcher's fallbacks, each
        # chosen from everything the pool allows at that capacity type (not the first one's types).
        first = choices[0]
        result = (*first, {capacity_type: types for capacity_type, _, types, _ in choices[1:]})
    cache[key] = result
    return result


def _choose(node: NewNode, index: InstanceTypeIndex,
            capacity_type: str) -> tuple[str, tuple[str, ...], tuple[str, ...], float] | str:
    """The cheapest ``MAX_INSTANCE_TYPES`` types at ``capacity_type`` that fit the node, or why none."""
    target, sized_on = node.target, node.pool_type
    pool = target.pool.pool
    need_all = any(requirement.min_values for requirement in pool.requirements)
    candidates = []
    for price, name, pool_type in index.launch_order(target, node.zones, capacity_type):
        room = pool_type.allocatable_on(node.zones, capacity_type)
        if not fits_within(node.used, room) or (node.allowed is not None and name not in node.allowed):
            continue
        if pool.limits and any(pool_type.capacity.get(limit, 0) > amount
                               for limit, amount in sized_on.capacity.items() if limit in pool.limits):
            continue
        candidates.append((price, name, pool_type))
        if len(candidates) >= MAX_INSTANCE_TYPES and not need_all:
            break
    if not candidates:
        return Rejection(pool.name, Criterion.NO_TYPE_FITS_TOGETHER).render()
    chosen = with_min_values([entry[2] for entry in candidates], pool.requirements)
    if chosen is None:
        return Rejection(pool.name, Criterion.LAUNCH_MIN_VALUES).render()
    zones = tuple(sorted(zone for zone in node.zones
                         if any((zone, capacity_type) in pool_type.offerings for pool_type in chosen)))
    return capacity_type, zones, tuple(pool_type.name for pool_type in chosen), candidates[0][0]
