"""The EC2 instance catalog of one region: instance types (DescribeInstanceTypes) and where each is
offered (DescribeInstanceTypeOfferings by availability zone), cached in the warm container so a warm
invocation makes no catalog calls.

Kept an hour (``CATALOG_TTL_SECONDS``): reading and parsing ~1,400 types costs ~1 s of Lambda CPU, so a
shorter life than the 10-minute safety pass would make every idle pass pay it. The catalogue changes when
AWS adds or retires a type (an hour's delay is harmless). It is read again sooner when the NodePools' needs
change (``expect``, each pass: ``domain/catalogue_needs.py``): when the NodePools differ from those it was
last checked for, or when they name an instance type, family, architecture or zone it lacks that it did
not lack after its last read. A name that stays missing (a typo, a type not in this region) is not read
for again until the hour is up."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from autoscaler.adapters.aws._calls import Caller
from autoscaler.app.ports import Clock
from autoscaler.domain.catalogue_needs import CatalogueNeeds
from autoscaler.domain.instance_types import instance_type_from_ec2
from autoscaler.domain.models import InstanceType

CATALOG_TTL_SECONDS = 3600.0


class InstanceCatalog:
    """Instance types and their zones, refreshed at most every ``ttl`` seconds (default an hour).
    ``calls`` counts the EC2 requests made, per operation."""

    def __init__(self, ec2: Any, *, clock: Clock, ttl: float = CATALOG_TTL_SECONDS) -> None:
        self._ec2 = Caller(ec2)
        self._clock = clock
        self._ttl = ttl
        self._types: dict[str, InstanceType] = {}
        self._raw: dict[str, dict[str, Any]] = {}
        self._zones_by_type: dict[str, frozenset[str]] = {}
        self._loaded_at: float | None = None
        self._needs: CatalogueNeeds | None = None  # the NodePools' needs it was last checked for
        self._missing: frozenset[str] = frozenset()  # what they named that it lacked after it was read

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._ec2.calls)

    def _fresh(self) -> bool:
        return self._loaded_at is not None and self._clock.monotonic() - self._loaded_at < self._ttl

    def refresh(self) -> None:
        infos = [info for page in self._ec2.pages("describe_instance_types") for info in page.get("InstanceTypes", ())]
        offerings = [off for page in self._ec2.pages("describe_instance_type_offerings",
                                                     LocationType="availability-zone")
                     for off in page.get("InstanceTypeOfferings", ())]
        self.load(infos, offerings)

    def load(self, infos: Iterable[Mapping[str, Any]], offerings: Iterable[Mapping[str, Any]]) -> None:
        """Fill the cache from DescribeInstanceTypes ``InstanceTypes`` and DescribeInstanceTypeOfferings
        ``InstanceTypeOfferings`` items (also how a snapshot or a test primes it without API calls)."""
        types: dict[str, InstanceType] = {}
        raw: dict[str, dict[str, Any]] = {}
        for info in infos:
            it = instance_type_from_ec2(dict(info))
            if it is not None:
                types[it.name] = it
                raw[it.name] = dict(info)
        zones: dict[str, set[str]] = defaultdict(set)
        for off in offerings:
            zones[str(off["InstanceType"])].add(str(off["Location"]))
        self._types, self._raw = types, raw
        self._zones_by_type = {name: frozenset(z) for name, z in zones.items() if name in types}
        self._loaded_at = self._clock.monotonic()
        self._missing = frozenset() if self._needs is None else self._needs.missing_from(
            types, {z for zs in self._zones_by_type.values() for z in zs})

    def expect(self, needs: CatalogueNeeds) -> bool:
        """Read the catalogue again now if ``needs`` changed since the last check or name something it lacks
        that it did not lack after its last read; True when it was read."""
        before, self._needs = self._needs, needs
        if self._loaded_at is None:
            return False  # not read yet: the first use reads it
        missing = needs.missing_from(self._types, {z for zs in self._zones_by_type.values() for z in zs})
        changed = before is not None and before.fingerprint != needs.fingerprint
        if not changed and missing <= self._missing:
            self._missing = missing
            return False
        self.refresh()
        return True

    def _ensure(self) -> None:
        if not self._fresh():
            self.refresh()

    def instance_types(self) -> dict[str, InstanceType]:
        """Every type nodes can run on, by name."""
        self._ensure()
        return self._types

    def raw_instance_types(self) -> dict[str, dict[str, Any]]:
        """The InstanceTypeInfo objects as EC2 returned them (the snapshot's ``instanceTypes``)."""
        self._ensure()
        return self._raw

    def zones_of(self, instance_type: str) -> frozenset[str]:
        self._ensure()
        return self._zones_by_type.get(instance_type, frozenset())

    def offered(self) -> dict[str, frozenset[str]]:
        """Instance type -> zones where it is offered."""
        self._ensure()
        return self._zones_by_type

    def zones(self) -> list[str]:
        self._ensure()
        return sorted({z for zs in self._zones_by_type.values() for z in zs})
