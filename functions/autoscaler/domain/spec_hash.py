"""Drift hashes: one stable number per launch-relevant NodePool template and EC2NodeClass spec, written on
the instances launched from them, so a later change of either is seen as drift (Karpenter's
``karpenter.sh/nodepool-hash`` and ``karpenter.k8s.aws/ec2nodeclass-hash``).

Which fields count follows Karpenter: a NodePool's template (labels, annotations, taints, startup taints,
node class, ``expireAfter``, ``terminationGracePeriod``) but not its requirements (a node whose labels no
longer satisfy them drifts by that check instead); an EC2NodeClass's spec but not its AMI, subnet and
security-group selector terms (a node drifts when what they resolve to no longer includes its own).
The number is FNV-1a (64 bit) of the fields' canonical JSON; bump ``HASH_VERSION`` when the set changes.
"""

from __future__ import annotations

import json
from typing import Any

from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.nodepool import NodePool

HASH_VERSION = "v1"
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def fnv1a64(data: bytes) -> int:
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def _hash(fields: Any) -> str:
    text = json.dumps([HASH_VERSION, fields], sort_keys=True, separators=(",", ":"), default=str)
    return str(fnv1a64(text.encode()))


def node_pool_hash(pool: NodePool) -> str:
    """The hash of ``pool``'s launch-relevant template."""
    def taints(ts: Any) -> list[list[str]]:
        return sorted([t.key, t.value, t.effect] for t in ts)
    return _hash({
        "labels": dict(pool.labels), "annotations": dict(pool.annotations), "taints": taints(pool.taints),
        "startupTaints": taints(pool.startup_taints), "nodeClassRef": pool.node_class_ref,
        "expireAfter": pool.disruption.expire_after, "terminationGracePeriod": pool.termination_grace_period,
    })


def node_class_hash(node_class: NodeClass) -> str:
    """The hash of ``node_class``'s launch-relevant spec (selector terms excluded)."""
    fields = node_class.model_dump(mode="json", exclude={"ami_selector_terms", "subnet_selector_terms",
                                                         "security_group_selector_terms",
                                                         # hash:"ignore" in Karpenter too: adding or
                                                         # changing reservations replaces no node.
                                                         "capacity_reservation_selector_terms"})
    return _hash(fields)
