"""A new node this plan opens: its target (NodePool and what it allows), the instance type it was sized
on, the zones, capacity types and instance types it may still be, and the pods put on it with the
resources they use and leave free. Where a new node's free CPU is tracked (``free``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.domain.models import Taint
from autoscaler.domain.scheduling.pod_class import PodClass
from autoscaler.domain.scheduling.pool_type import PoolType
from autoscaler.domain.scheduling.target import Target
from autoscaler.domain.scheduling.vector import Vec, fit_count, minus, plus


@dataclass(eq=False, slots=True)
class NewNode:
    target: Target
    pool_type: PoolType  # the type it was sized on: ``limit`` is its allocatable
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    limit: Vec
    used: Vec
    zones: frozenset[str]
    capacity_types: frozenset[str]
    classes: dict[int, int] = field(default_factory=dict)  # class id -> pods on it
    allowed: frozenset[str] | None = None  # instance types every class on the node allows
    free: Vec = ()

    def __post_init__(self) -> None:
        self.free = minus(self.limit, self.used)

    def conflicts_with(self, cls: PodClass) -> bool:
        return cls.conflicts_on(self.classes, ())

    def room_for(self, cls: PodClass) -> int:
        """Pods of ``cls`` its per-node bounds still allow here (resources aside)."""
        return cls.room_on(self.classes, ())

    def add(self, cls: PodClass, count: int) -> None:
        """Put ``count`` pods of ``cls`` on it (the class counts them as placed)."""
        self.used = plus(self.used, cls.request, count)
        self.free = minus(self.limit, self.used)
        self.classes[cls.id] = self.classes.get(cls.id, 0) + count
        cls.placed += count

    def fill(self, placed: dict[int, int], used: Vec) -> None:
        """Set its pods at once (group packing decides a whole node); the classes count them."""
        self.used, self.free, self.classes = used, minus(self.limit, used), placed

    def can_add(self, cls: PodClass, zones: frozenset[str] | None, capacity_types: frozenset[str] | None,
                count: int) -> int:
        """How many of ``count`` pods of ``cls`` it takes, narrowing its zones, capacity types and
        instance types to what ``cls`` allows when it takes any (``add`` them next)."""
        if fit_count(self.free, cls.request) == 0:
            return 0
        own, pool_type = self.target, self.pool_type
        theirs = next((target for target in cls.targets if target.pool is own.pool), None)
        if theirs is None:
            return 0
        same = theirs.signature == own.signature
        if not same and (pool_type.name not in theirs.type_names() or any(
                self.labels.get(key, value) != value for key, value in theirs.labels.items())):
            return 0
        usable_zones = self.zones & theirs.zones if zones is None else self.zones & theirs.zones & zones
        usable_types = (self.capacity_types & theirs.capacity_types if capacity_types is None
                        else self.capacity_types & theirs.capacity_types & capacity_types)
        if not usable_zones or not usable_types or not any((zone, capacity_type) in pool_type.offerings
                                                           for zone in usable_zones for capacity_type in usable_types):
            return 0
        if self.conflicts_with(cls):
            return 0
        taken = min(count, self.room_for(cls), fit_count(self.free, cls.request))
        if taken > 0:
            self.zones, self.capacity_types = frozenset(usable_zones), frozenset(usable_types)
            if not same:
                names = theirs.type_names()
                self.allowed = names if self.allowed is None else self.allowed & names
                self.labels.update(theirs.labels)
        return taken
