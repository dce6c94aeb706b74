"""Small readings of raw Kubernetes objects the simulation's runner and report share: a PDB's budget with
the disruption controller's arithmetic, a node's readiness, pool, taints and whether it is leaving, and
virtual times as ``h:mm:ss``."""

from __future__ import annotations

import math
from typing import Any

from simulator.kube_store import _scaled, pod_ready, selector_matches

DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"  # Karpenter v1's disruption taint
REPLACEMENT_REQUESTED_ANNOTATION = "autoscaler.eks.aws/replacement-requested"  # the product's, docs/disruption.md


def budget(pdb: dict[str, Any], pods: list[dict[str, Any]], scale: dict[str, int]) -> tuple[int, int]:
    """(healthy pods, pods the budget requires) for ``pdb``; ``scale`` maps a controller uid to its replicas."""
    ns, spec = pdb["metadata"].get("namespace"), pdb.get("spec") or {}
    chosen = [p for p in pods if p["metadata"].get("namespace") == ns
              and selector_matches(spec.get("selector"), p["metadata"].get("labels") or {})]
    expected, owners = 0, set()
    for p in chosen:
        owner = next((o for o in p["metadata"].get("ownerReferences") or () if o.get("controller")), None)
        if owner is not None and owner.get("uid") in scale:
            if owner["uid"] not in owners:
                owners.add(owner["uid"])
                expected += scale[owner["uid"]]
        elif (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            expected += 1
    healthy = sum(1 for p in chosen if pod_ready(p))
    if spec.get("maxUnavailable") is not None:
        desired = expected - _scaled(spec["maxUnavailable"], expected, where="maxUnavailable")
    else:
        desired = _scaled(spec.get("minAvailable", 1), expected, where="minAvailable")
    return healthy, max(0, desired)


def node_ready(node: dict[str, Any]) -> str:
    return next((str(c.get("status")) for c in (node.get("status") or {}).get("conditions") or ()
                 if c.get("type") == "Ready"), "Unknown")


def node_leaving(node: dict[str, Any]) -> bool:
    """Cordoned, tainted ``karpenter.sh/disrupted``, or announced as being replaced (a drifted or expiring
    node gets its replacement before it is cordoned: that launch is a replacement, not a duplicate)."""
    spec = node.get("spec") or {}
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return (bool(spec.get("unschedulable")) or REPLACEMENT_REQUESTED_ANNOTATION in annotations
            or any(t.get("key") == DISRUPTED_TAINT_KEY for t in spec.get("taints") or ()))


def group_of(inst: Any) -> str:
    group = inst.tags.get("eks:nodegroup-name")
    return f"node group {group}" if group else f"pool {inst.node_pool}"


def pool_of(node: dict[str, Any]) -> str:
    labels = node["metadata"].get("labels") or {}
    return str(labels.get("karpenter.sh/nodepool") or labels.get("eks.amazonaws.com/nodegroup") or "other")


def taint_keys(node: dict[str, Any]) -> str:
    return ", ".join(sorted(t.get("key", "") for t in (node.get("spec") or {}).get("taints") or ())) or "none"


def clock_text(seconds: float) -> str:
    if math.isinf(seconds):
        return "end"
    s = round(seconds)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def owner_name(pod: dict[str, Any]) -> str:
    """The workload a pod belongs to: its controller's name, a ReplicaSet's Deployment (the name less its
    pod-template hash); ``(bare)`` for a pod no controller owns."""
    owner: dict[str, Any] = next(iter(pod["metadata"].get("ownerReferences") or ()), {})
    name = str(owner.get("name", "(bare)"))
    return name.rsplit("-", 1)[0] if owner.get("kind") == "ReplicaSet" else name
