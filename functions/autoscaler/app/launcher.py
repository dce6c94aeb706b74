"""From a planned node (``Launch``) to the request the cloud launches (``FleetRequest``): the one place
that decides claim ids, capacity-type preference and which kubelet settings apply."""

from __future__ import annotations

import secrets
import string
from collections.abc import Mapping
from typing import cast

from autoscaler.domain.errors import ConfigError
from autoscaler.domain.fleet import FleetRequest
from autoscaler.domain.models import CapacityType
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import Launch
from autoscaler.domain.spec_hash import node_pool_hash

_CLAIM_ALPHABET = string.ascii_lowercase + string.digits


def new_claim_id(node_pool: str = "") -> str:
    """A fresh node-claim id, ``<nodepool>-<8 random chars>`` like Karpenter's NodeClaim names."""
    suffix = "".join(secrets.choice(_CLAIM_ALPHABET) for _ in range(8))
    return f"{node_pool}-{suffix}" if node_pool else f"nodeclaim-{suffix}"


def fleet_request_for(launch: Launch, *, cluster_name: str, node_pools: Mapping[str, NodePool],
                      node_classes: Mapping[str, NodeClass], claim_id: str | None = None) -> FleetRequest:
    """The planner chose ``launch.capacity_type``; the other types the NodePool allows follow it, so
    the launcher can fall back (spot -> on-demand) when EC2 has no capacity. A node planned as
    ``reserved`` tries the EC2NodeClass's reservations first and falls back to what the pool allows."""
    node_class = node_classes.get(launch.node_class)
    if node_class is None:
        raise ConfigError(f"NodePool {launch.node_pool}: nodeClassRef {launch.node_class!r} names no EC2NodeClass")
    pool = node_pools.get(launch.node_pool)
    # The planner chose `reserved` for a node it fitted into a reservation with room (scheduling/reserved.py).
    preference = ["reserved"] if launch.capacity_type == "reserved" and pool is not None and \
        pool.allows_reserved and node_class.capacity_reservation_selector_terms else []
    for ct in (launch.capacity_type, *launch.capacity_types):
        # A pool allowing only `reserved` was planned on on-demand offerings: that is no fallback for it.
        if ct not in preference and ct != "reserved" and (pool is None or ct in pool.capacity_types):
            preference.append(ct)
    if not preference:
        raise ConfigError(f"NodePool {launch.node_pool} allows only karpenter.sh/capacity-type reserved, but "
                          f"EC2NodeClass {node_class.name} has no capacity reservation with room for this node "
                          "(capacityReservationSelectorTerms select none, or all are full); allow on-demand in "
                          "the NodePool to fall back")
    # v1 moved kubelet settings to the EC2NodeClass; v1beta1 / v1alpha5 kept them on the pool.
    kubelet = node_class.kubelet or (pool.kubelet if pool else None)
    return FleetRequest(
        claim_id=claim_id or new_claim_id(launch.node_pool),
        cluster_name=cluster_name,
        node_pool=launch.node_pool,
        node_class=node_class,
        capacity_types=tuple(cast(CapacityType, c) for c in preference),
        instance_types=launch.instance_types,
        zones=launch.zones,
        labels=dict(launch.labels),
        taints=launch.taints,
        startup_taints=launch.startup_taints,
        kubelet=kubelet,
        node_pool_hash=node_pool_hash(pool) if pool is not None else "",
        fallback_instance_types={ct: types for ct, types in launch.fallback_instance_types.items()
                                 if ct in preference and ct != launch.capacity_type},
    )
