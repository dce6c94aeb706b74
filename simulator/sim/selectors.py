"""Label selectors, node selectors and taint tolerations on raw Kubernetes JSON, as kube-scheduler's filters
read them. Part of the simulation's kube-scheduler oracle (``simulator/sim/scheduler.py``); the simulated
controllers and kubelet use the same rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]


def labels_of(obj: Obj) -> Mapping[str, str]:
    """An object's labels (none: empty)."""
    return (obj.get("metadata") or {}).get("labels") or {}


# ----- label and node selectors ------------------------------------------------------------------
def match_expression(expr: Obj, labels: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement / LabelSelectorRequirement against a label map."""
    key, op, values = expr.get("key", ""), expr.get("operator", ""), [str(v) for v in expr.get("values") or ()]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def label_selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector: None matches nothing (as in affinity terms and spread constraints)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(match_expression(e, labels) for e in selector.get("matchExpressions") or ())


def node_selector_term_matches(term: Obj, node: Obj) -> bool:
    """A NodeSelectorTerm: its expressions and fields ANDed; an empty term matches nothing."""
    exprs, fields = term.get("matchExpressions") or (), term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    labels = labels_of(node)
    name_field = {"metadata.name": node["metadata"]["name"]}
    return all(match_expression(e, labels) for e in exprs) and all(match_expression(f, name_field) for f in fields)


def required_node_affinity(pod: Obj, node: Obj) -> bool:
    """NodeAffinity filter: nodeSelector (every label) and the required terms (any term)."""
    spec = pod.get("spec") or {}
    labels = labels_of(node)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(node_selector_term_matches(t, node) for t in required.get("nodeSelectorTerms") or ())


# ----- taints ------------------------------------------------------------------------------------
def tolerates(toleration: Obj, taint: Obj) -> bool:
    """v1.Toleration.ToleratesTaint."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return op == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    return op == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod: Obj, taints: Iterable[Obj]) -> Obj | None:
    """The first NoSchedule/NoExecute taint no toleration of the pod matches (PreferNoSchedule is a score)."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or ()
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None
