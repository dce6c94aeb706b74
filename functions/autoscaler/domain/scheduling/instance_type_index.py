"""The instance types a plan may launch, indexed for the questions placement asks many times: which
NodePools (and which of their types, zones and capacity types) a class variant may use (a ``Target``,
or a ``Rejection`` saying why not), which types hold a class's pod, what minValues leaves, the launch
order of a target's types and its price/size frontier. It owns those caches, for one plan."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, NODEPOOL_LABEL, WELL_KNOWN_KEYS, ZONE_KEYS
from autoscaler.domain.models import untolerated_taints
from autoscaler.domain.nodepool import requirement_allows
from autoscaler.domain.scheduling.existing_node import ExistingNode
from autoscaler.domain.scheduling.node_mix import frontier
from autoscaler.domain.scheduling.node_pool_view import NodePoolView
from autoscaler.domain.scheduling.pod_class import PodClass
from autoscaler.domain.scheduling.pool_type import INFINITE_PRICE, PoolType
from autoscaler.domain.scheduling.rejection import Criterion, Rejection, render_all
from autoscaler.domain.scheduling.requirements import (
    Variant,
    describe,
    describe_resources,
    intersect,
    untolerated_prefer_no_schedule,
    with_min_values,
)
from autoscaler.domain.scheduling.target import Target
from autoscaler.domain.scheduling.vector import fits_within, plus, vector


class InstanceTypeIndex:
    def __init__(self, pools: list[NodePoolView], keys: Sequence[str]) -> None:
        self.pools = pools
        self.keys = keys
        self._targets: dict[tuple[object, ...], Target | Rejection] = {}
        self._fitting: dict[tuple[object, ...], list[PoolType]] = {}
        self._type_sets: dict[tuple[str, ...], int] = {}
        self._sizing: dict[tuple[object, ...], list[PoolType]] = {}
        self._launch_order: dict[tuple[object, ...], list[tuple[float, str, PoolType]]] = {}
        self._frontiers: dict[tuple[object, ...], list[tuple[float, PoolType]]] = {}

    # --- targets ----------------------------------------------------------------------------------------

    def policy_target(self, cls: PodClass, variant: Variant, view: NodePoolView) -> Target | Rejection:
        """``cls``'s target on ``view`` as a topology spread's node policies see it: taints left out (its
        nodeTaintsPolicy decides them), and its volumes' zones too (kube-scheduler measures the skew over
        every domain the node policies admit; the volume only limits where the pod itself may go)."""
        key = (view.index, variant, None, None, cls.sample.host_ports)
        target = self._targets.get(key)
        if target is None:
            target = self._targets[key] = self._target(cls, variant, view, taints=False, volumes=False)
        return target

    def _target(self, cls: PodClass, variant: Variant, view: NodePoolView, *,
                taints: bool = True, volumes: bool = True) -> Target | Rejection:
        pool = view.pool
        if not view.types:
            return Rejection(pool.name, Criterion.NO_PRICED_OFFERING, (str(list(pool.capacity_types)),))
        untolerated = untolerated_taints(cls.sample.tolerations, pool.taints) if taints else []
        if untolerated:
            taint = untolerated[0]
            return Rejection(pool.name, Criterion.TAINT_NOT_TOLERATED,
                             (f"{taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}",))
        for port in cls.sample.host_ports:
            daemonset = next((name for held, name in view.daemon_ports.items() if held.overlaps(port)), None)
            if daemonset is not None:
                return Rejection(pool.name, Criterion.HOST_PORT_TAKEN, (f"{port.port}/{port.protocol}", daemonset))
        zones, capacity_types = set(view.zones), set(view.capacity_types)
        if volumes and cls.zone_pin is not None:
            zones &= cls.zone_pin
        type_requirements, labels = [], {}
        for requirement in variant:
            if requirement.key in ZONE_KEYS:
                zones = {zone for zone in zones if requirement_allows(requirement, zone)}
            elif requirement.key == CAPACITY_TYPE_LABEL:
                capacity_types = {kind for kind in capacity_types if requirement_allows(requirement, kind)}
            elif requirement.key == NODEPOOL_LABEL:
                if not requirement_allows(requirement, pool.name):
                    return Rejection(pool.name, Criterion.REQUIREMENT_NOT_SATISFIED, (describe(requirement),))
            elif requirement.key in WELL_KNOWN_KEYS:
                type_requirements.append(requirement)
            elif requirement.key in pool.labels:
                if not requirement_allows(requirement, pool.labels[requirement.key]):
                    return Rejection(pool.name, Criterion.LABEL_MISMATCH,
                                     (f"{requirement.key}={pool.labels[requirement.key]}", describe(requirement)))
            elif requirement.key in view.custom:
                value = intersect(requirement, view.custom[requirement.key])
                if value is False:
                    return Rejection(pool.name, Criterion.REQUIREMENT_CONFLICT, (describe(requirement),))
                if isinstance(value, str):
                    labels[requirement.key] = value
            elif requirement.operator not in ("NotIn", "DoesNotExist"):
                return Rejection(pool.name, Criterion.LABEL_NOT_SET, (describe(requirement), requirement.key))
        if not zones:
            return Rejection(pool.name, Criterion.NO_ZONE)
        if not capacity_types:
            return Rejection(pool.name, Criterion.NO_CAPACITY_TYPE)
        types = [pool_type for pool_type in view.types
                 if all(requirement_allows(requirement, pool_type.labels.get(requirement.key))
                        for requirement in type_requirements)
                 and any((zone, kind) in pool_type.offerings for zone in zones for kind in capacity_types)]
        if not types:
            wanted = ", ".join(describe(requirement) for requirement in type_requirements) or "zone/capacity type"
            return Rejection(pool.name, Criterion.NO_INSTANCE_TYPE, (wanted,))
        # Targets that allow the same nodes are one: classes with different but compatible requirements
        # (``team In [x]``, ``team NotIn [y]``) are packed together.
        names = tuple(pool_type.name for pool_type in types)
        signature = (view.index, self._type_sets.setdefault(names, len(self._type_sets)), frozenset(zones),
                     frozenset(capacity_types), tuple(sorted(labels.items())))
        return Target(view, types, frozenset(zones), frozenset(capacity_types), labels, signature)

    def resolve(self, cls: PodClass, existing: Sequence[ExistingNode]) -> str | None:
        """Pick the class's requirement variant and its NodePool targets; a reason when nothing fits."""
        rejections: list[Rejection] = []
        for variant in cls.variants:
            targets, rejections = [], []
            for view in self.pools:
                key = (view.index, variant, cls.zone_pin, cls.sample.tolerations, cls.sample.host_ports)
                target = self._targets.get(key)
                if target is None:
                    target = self._targets[key] = self._target(cls, variant, view)
                if isinstance(target, Rejection):
                    rejections.append(target)
                    continue
                fits = self._fitting.get((key, cls.request))
                if fits is None:
                    fits = self._fitting[(key, cls.request)] = [
                        pool_type for pool_type in target.types if fits_within(cls.request, pool_type.allocatable)]
                if not fits:
                    rejections.append(self._too_large(cls, target))
                    continue
                sizing = self.min_values_sizing(target, fits)
                if sizing is not None and not sizing:
                    rejections.append(Rejection(view.name, Criterion.MIN_VALUES,
                                                (describe_resources(cls.sample.requests),)))
                    continue
                targets.append(replace(target, types=fits, sizing=sizing, base_types=target.types))
            if targets or any(node.admits(cls, variant) for node in existing):
                # An untolerated PreferNoSchedule taint is avoided while another NodePool can take the pod.
                targets.sort(key=lambda target: bool(untolerated_prefer_no_schedule(
                    cls.sample.tolerations, target.pool.pool.taints)))
                cls.targets, cls.variant = targets, variant
                return None
        if not self.pools:
            return "no NodePool is defined"
        return render_all(rejections) or "no NodePool or node matches"

    def _too_large(self, cls: PodClass, target: Target) -> Rejection:
        """Why no instance type of ``target`` holds a pod of ``cls``: its requests, or the DaemonSet overhead."""
        without_daemons = [pool_type for pool_type in target.types if fits_within(
            cls.request, plus(pool_type.allocatable, vector(self.keys, pool_type.overhead)))]
        requests = describe_resources(cls.sample.requests)
        if without_daemons:
            largest = max(without_daemons, key=lambda pool_type: pool_type.allocatable)
            return Rejection(target.pool.name, Criterion.DAEMON_OVERHEAD,
                             (requests, describe_resources(largest.overhead), largest.name))
        return Rejection(target.pool.name, Criterion.TOO_LARGE, (requests or "none",))

    # --- instance types of a target ----------------------------------------------------------------------

    def min_values_sizing(self, target: Target, fits: list[PoolType]) -> list[PoolType] | None:
        """With ``minValues`` on the NodePool, the types a node may be filled up to: those for which the
        types at least as large still meet every minValues (so the launch list does); None without."""
        requirements = [requirement for requirement in target.pool.pool.requirements if requirement.min_values]
        if not requirements:
            return None
        key = (target.signature, tuple(pool_type.name for pool_type in fits))
        sizing = self._sizing.get(key)
        if sizing is None:
            by_price = sorted(target.types, key=lambda pool_type: (
                pool_type.sizing_price(target.zones, target.capacity_types), pool_type.name))
            sizing = self._sizing[key] = [candidate for candidate in fits if with_min_values(
                [larger for larger in by_price if fits_within(candidate.allocatable, larger.allocatable)],
                requirements) is not None]
        return sizing

    def launch_order(self, target: Target, zones: frozenset[str],
                     capacity_type: str) -> list[tuple[float, str, PoolType]]:
        """Every type the target allows with an offering of ``capacity_type`` in ``zones``, cheapest first
        (any of them may be listed: one that fits every pod on a node fits each class's)."""
        key = (target.signature, zones, capacity_type)
        ordered = self._launch_order.get(key)
        if ordered is None:
            base = target.types if target.base_types is None else target.base_types
            ordered = sorted(((price, pool_type.name, pool_type) for pool_type in base
                              if (price := pool_type.price(zones, capacity_type)) < INFINITE_PRICE),
                             key=lambda entry: (entry[0], entry[1]))
            self._launch_order[key] = ordered
        return ordered

    def frontier(self, target: Target, types: list[PoolType], zones: frozenset[str],
                 capacity_types: frozenset[str]) -> list[tuple[float, PoolType]]:
        """``node_mix.frontier`` of ``types`` at their sizing prices, once per (target, zones, capacity types)."""
        key = (id(target), zones, capacity_types)
        found = self._frontiers.get(key)
        if found is None:
            found = self._frontiers[key] = frontier(
                [(pool_type.sizing_price(zones, capacity_types), pool_type) for pool_type in types])
        return found
