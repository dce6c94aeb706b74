"""When a Node of ours needs the provisioner's lifecycle step, read from a Node's raw API JSON: the watcher
function (``app/pod_watcher.py``) and the simulator's watcher model (``simulator/sim/watch.py``) wake the
provisioner on these triggers, as Karpenter's NodeClaim controllers react to a Node's appearance.

The watcher selects our not-yet-initialised nodes (``NODE_WAKE_SELECTOR``); within it a node wakes the
provisioner once when it carries ``karpenter.sh/unregistered`` (the sweep reconciles its labels and removes
the taint) and once when its Ready condition turns True (the sweep then sets ``karpenter.sh/initialized``).
Nodes Karpenter v0.2x launched (``karpenter.sh/provisioner-name``) were initialised by Karpenter already.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.domain.keys import INITIALIZED_LABEL, NODEPOOL_LABEL, UNREGISTERED_TAINT_KEY
from autoscaler.domain.objects import parse_timestamp

NODE_WAKE_SELECTOR = f"{NODEPOOL_LABEL},!{INITIALIZED_LABEL}"
REGISTERED = "registered"
READY = "ready"


def node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def awaits_initialization(node: Mapping[str, Any]) -> bool:
    """In the watcher's selection: ours (a NodePool label) and not initialised yet (the API server filters
    by ``NODE_WAKE_SELECTOR``; checked again so a stream without it stays correct)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return NODEPOOL_LABEL in labels and INITIALIZED_LABEL not in labels


def wake_reasons(node: Mapping[str, Any]) -> frozenset[str]:
    """Which lifecycle triggers the node shows now: ``registered`` (the unregistered taint is on it) and
    ``ready`` (its Ready condition is True). Empty for a node outside the selection."""
    if not awaits_initialization(node):
        return frozenset()
    spec, status = node.get("spec") or {}, node.get("status") or {}
    reasons = set()
    if any(t.get("key") == UNREGISTERED_TAINT_KEY for t in spec.get("taints") or ()):
        reasons.add(REGISTERED)
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()):
        reasons.add(READY)
    return frozenset(reasons)


def created_at(node: Mapping[str, Any]) -> float | None:
    """The node's creationTimestamp (epoch seconds), or None when absent or unparseable."""
    try:
        return parse_timestamp((node.get("metadata") or {}).get("creationTimestamp")) or None
    except ValueError:
        return None
