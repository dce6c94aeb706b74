"""Drift: a node no longer matches what its NodePool and EC2NodeClass would launch now, and is replaced
(capacity first, then the drain) within the budgets for ``Drifted``. Karpenter's checks, in its order:

- the NodePool's launch-relevant template changed (``karpenter.sh/nodepool-hash`` tag of the instance);
- the EC2NodeClass's launch-relevant spec changed (``karpenter.k8s.aws/ec2nodeclass-hash`` tag);
- the instance's AMI is not one the node class's AMI selector terms resolve to now (e.g. an
  ``al2023@latest`` alias that moved), its subnet is not selected any more, or its security groups are
  not exactly the selected ones;
- the node's labels no longer satisfy the NodePool's requirements (labels the node lacks are allowed
  for well-known keys, as Karpenter allows undefined well-known labels).

An instance launched before the hashes were written (no tag) does not drift by hash.
"""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.domain.fleet import CloudInstance, ResolvedNodeClass
from autoscaler.domain.keys import NODECLASS_HASH_TAG, NODEPOOL_HASH_TAG, WELL_KNOWN_KEYS
from autoscaler.domain.models import Node
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.nodepool import NodePool, requirement_allows
from autoscaler.domain.spec_hash import node_class_hash, node_pool_hash


def drifted(node: Node, pool: NodePool, *, node_class: NodeClass | None, instance: CloudInstance | None,
            resolved: ResolvedNodeClass | None, hashes: Mapping[str, str] | None = None) -> str | None:
    """Why ``node`` has drifted (a sentence for the Event and log), or None. ``hashes``: the pool's and node
    class's hashes already computed for this pass (by ``drift_hashes``), else computed here."""
    tags = instance.tags if instance is not None else {}
    hashes = hashes if hashes is not None else drift_hashes(pool, node_class)
    stamped = tags.get(NODEPOOL_HASH_TAG)
    if stamped and stamped != hashes[NODEPOOL_HASH_TAG]:
        return f"NodePool {pool.name}'s template changed since the node was launched (nodepool-hash)"
    stamped = tags.get(NODECLASS_HASH_TAG)
    if node_class is not None and stamped and stamped != hashes[NODECLASS_HASH_TAG]:
        return f"EC2NodeClass {node_class.name}'s spec changed since the node was launched (ec2nodeclass-hash)"
    if instance is not None and resolved is not None:
        if instance.image_id and resolved.amis and instance.image_id not in resolved.amis:
            return (f"AMI {instance.image_id} is no longer selected by EC2NodeClass {pool.node_class_ref} "
                    f"(now {', '.join(sorted(resolved.amis))})")
        if instance.subnet_id and resolved.subnets and instance.subnet_id not in resolved.subnets:
            return f"subnet {instance.subnet_id} is no longer selected by EC2NodeClass {pool.node_class_ref}"
        groups = instance.security_groups
        if groups and resolved.security_groups and groups != resolved.security_groups:
            return (f"security groups {', '.join(sorted(groups))} are not the ones EC2NodeClass "
                    f"{pool.node_class_ref} selects now ({', '.join(sorted(resolved.security_groups))})")
    for r in pool.requirements:
        value = node.labels.get(r.key)
        if value is None and r.key in WELL_KNOWN_KEYS:
            continue
        if not requirement_allows(r, value):
            shown = "absent" if value is None else f"{value!r}"
            return (f"label {r.key} ({shown}) no longer satisfies NodePool {pool.name}'s requirement "
                    f"{r.operator} {list(r.values)}")
    return None


def drift_hashes(pool: NodePool, node_class: NodeClass | None) -> dict[str, str]:
    """The hashes ``drifted`` compares a node's instance tags with: the same for every node of the pool."""
    out = {NODEPOOL_HASH_TAG: node_pool_hash(pool)}
    if node_class is not None:
        out[NODECLASS_HASH_TAG] = node_class_hash(node_class)
    return out
