"""A non-empty ``namespaceSelector`` of a pod (anti-)affinity term, resolved as kube-scheduler does: the
term applies to the namespaces it lists plus those whose labels the selector matches (none matching and
none listed: no namespace). Resolved once per plan into the term's namespace list, so matching a pod
against a term stays a set lookup."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from autoscaler.domain.models import NO_NAMESPACE, Pod, PodAffinityTerm
from autoscaler.domain.plan import PlanInput


def resolve_namespace_selectors(snapshot: PlanInput) -> PlanInput:
    """The snapshot with every affinity term's namespaceSelector turned into namespace names (the
    snapshot itself when no term has one)."""
    if not any(_selecting(pod) for pod in snapshot.pods):
        return snapshot
    labels = snapshot.namespaces
    return replace(snapshot, pods=[_resolved(pod, labels) if _selecting(pod) else pod for pod in snapshot.pods])


def _selecting(pod: Pod) -> bool:
    return any(term.namespace_selector is not None for term in _terms(pod))


def _terms(pod: Pod) -> tuple[PodAffinityTerm, ...]:
    return (*pod.pod_affinity, *pod.pod_anti_affinity, *(term for _, term in pod.preferred_pod_affinity),
            *(term for _, term in pod.preferred_pod_anti_affinity))


def _resolved(pod: Pod, labels: Mapping[str, Mapping[str, str]]) -> Pod:
    def resolve(term: PodAffinityTerm) -> PodAffinityTerm:
        if term.namespace_selector is None:
            return term
        matched = sorted(name for name, own in labels.items() if term.namespace_selector.matches(own))
        namespaces = tuple(dict.fromkeys((*term.namespaces, *matched))) or (NO_NAMESPACE,)
        return replace(term, namespaces=namespaces, namespace_selector=None)

    return replace(
        pod, pod_affinity=tuple(resolve(term) for term in pod.pod_affinity),
        pod_anti_affinity=tuple(resolve(term) for term in pod.pod_anti_affinity),
        preferred_pod_affinity=tuple((weight, resolve(term)) for weight, term in pod.preferred_pod_affinity),
        preferred_pod_anti_affinity=tuple((weight, resolve(term)) for weight, term in pod.preferred_pod_anti_affinity))
