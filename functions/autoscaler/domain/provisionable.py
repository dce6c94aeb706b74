"""Karpenter's provisionable-pod test (``pkg/utils/pod.IsProvisionable``) on a pod's raw API JSON.

The watcher function keeps only the keys of provisionable pods, and reads them straight from watch
events: building the full ``Pod`` model for every unbound-pod update would cost the 128 MB watcher CPU and
imports it does not need. A pod is provisionable when the kube-scheduler marked it ``PodScheduled=False``
with reason ``Unschedulable``, it is not bound, not about to bind through preemption
(``status.nominatedNodeName``), not finished or being deleted, and neither a DaemonSet pod nor a mirror
pod (those never need new capacity from a NodePool).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.domain.keys import MIRROR_POD_ANNOTATION
from autoscaler.domain.objects import parse_timestamp

UNSCHEDULABLE_REASON = "Unschedulable"


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name``, as ``Pod.key``."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def _unschedulable_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``PodScheduled`` condition with reason ``Unschedulable`` (Karpenter's ``FailedToSchedule`` looks
    at type and reason only), or None."""
    return next((c for c in (pod.get("status") or {}).get("conditions") or ()
                 if c.get("type") == "PodScheduled" and c.get("reason") == UNSCHEDULABLE_REASON), None)


def failed_to_schedule(pod: Mapping[str, Any]) -> bool:
    """The kube-scheduler has seen the pod and found no node for it."""
    return _unschedulable_condition(pod) is not None


def unschedulable_since(pod: Mapping[str, Any]) -> float | None:
    """When the scheduler marked the pod Unschedulable (epoch seconds), or None when it does not say
    (no ``lastTransitionTime``, or one that does not parse)."""
    condition = _unschedulable_condition(pod)
    if condition is None:
        return None
    try:
        return parse_timestamp(condition.get("lastTransitionTime")) or None
    except ValueError:
        return None


def is_provisionable(pod: Mapping[str, Any]) -> bool:
    """Whether this pod needs new capacity now (Karpenter's ``IsProvisionable``, plus not finished and not
    being deleted: the API server's field selector already drops finished pods from the watch)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or status.get("nominatedNodeName") or meta.get("deletionTimestamp"):
        return False
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    if MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
        return False
    owners = meta.get("ownerReferences") or ()
    if any(o.get("controller") and o.get("kind") in ("DaemonSet", "Node") for o in owners):
        return False
    return failed_to_schedule(pod)
