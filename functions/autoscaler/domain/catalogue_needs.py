"""What the NodePools ask of the instance catalogue: the instance types, families, architectures and zones
their requirements name (``In``), and a fingerprint of every requirement, so a warm catalogue can tell
that it must be read again (``adapters/aws/catalog.py``) when the NodePools change or name something it
lacks, rather than only when its hour is up."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autoscaler.domain.keys import (
    ARCH_LABEL,
    FAMILY_LABEL,
    INSTANCE_TYPE_LABEL,
    INSTANCE_TYPE_LABEL_BETA,
    ZONE_KEYS,
)
from autoscaler.domain.models import InstanceType
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.spec_hash import fnv1a64


@dataclass(frozen=True, slots=True)
class CatalogueNeeds:
    fingerprint: str  # every NodePool's name, requirements and template labels
    instance_types: frozenset[str] = frozenset()
    families: frozenset[str] = frozenset()
    architectures: frozenset[str] = frozenset()
    zones: frozenset[str] = frozenset()

    def missing_from(self, types: Mapping[str, InstanceType], zones: Iterable[str]) -> frozenset[str]:
        """What these needs name that a catalogue of ``types`` offered in ``zones`` lacks, as ``key=value``."""
        families = {it.family for it in types.values()}
        architectures = {it.architecture for it in types.values()}
        offered = set(zones)
        return frozenset(
            [f"{INSTANCE_TYPE_LABEL}={t}" for t in self.instance_types if t not in types]
            + [f"{FAMILY_LABEL}={f}" for f in self.families if f not in families]
            + [f"{ARCH_LABEL}={a}" for a in self.architectures if a not in architectures]
            + [f"topology.kubernetes.io/zone={z}" for z in self.zones if z not in offered])


def catalogue_needs(node_pools: Iterable[NodePool]) -> CatalogueNeeds:
    """The needs of ``node_pools`` (requirements with ``In`` and template labels name values)."""
    named: dict[str, set[str]] = {"types": set(), "families": set(), "architectures": set(), "zones": set()}
    described = []
    for pool in sorted(node_pools, key=lambda p: p.name):
        described.append([pool.name, sorted(pool.labels.items()),
                          sorted([r.key, r.operator, sorted(r.values)] for r in pool.requirements)])
        values = [(r.key, v) for r in pool.requirements if r.operator == "In" for v in r.values]
        values += list(pool.labels.items())
        for key, value in values:
            if key in (INSTANCE_TYPE_LABEL, INSTANCE_TYPE_LABEL_BETA):
                named["types"].add(value)
            elif key == FAMILY_LABEL:
                named["families"].add(value)
            elif key == ARCH_LABEL:
                named["architectures"].add(value)
            elif key in ZONE_KEYS:
                named["zones"].add(value)
    fingerprint = str(fnv1a64(json.dumps(described, separators=(",", ":")).encode()))
    return CatalogueNeeds(fingerprint, frozenset(named["types"]), frozenset(named["families"]),
                          frozenset(named["architectures"]), frozenset(named["zones"]))
