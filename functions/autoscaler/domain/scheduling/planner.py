"""``plan``: decide where every pending pod goes. Each plan is a fresh ``Scheduler``; preferred pod
(anti-)affinity is taken as required, and a pod the plan cannot place gives up one preferred term and
the plan is made again."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

from autoscaler.domain.models import Pod, PodAffinityTerm
from autoscaler.domain.plan import Plan, PlanInput
from autoscaler.domain.scheduling.namespace_selector import resolve_namespace_selectors
from autoscaler.domain.scheduling.prepared import Prepared
from autoscaler.domain.scheduling.scheduler import Scheduler


def plan(snapshot: PlanInput, *, unavailable: Collection[tuple[str, str, str]] = (),
         timer: Callable[[], float] | None = None, prepared: Prepared | None = None) -> Plan:
    """Decide where every pending pod goes. ``unavailable`` lists (instance type, zone, capacity type)
    offerings to avoid (recent insufficient-capacity errors, interrupted spot pools).

    Preferred pod affinity and anti-affinity are honoured as if required; a pod the plan cannot place
    gives up one preferred term and the plan is made again, until it is placed or has none left.

    ``timer`` (a monotonic seconds reading, injected: the domain reads no clock) measures
    ``solve_seconds``; without it that is 0. ``prepared``: what a warm caller kept (``prepared.py``);
    the plan is the same without it."""
    start = timer() if timer else 0.0
    snapshot = resolve_namespace_selectors(snapshot)
    relaxed: dict[str, int] = {}
    terms = {pod.key: preferred_terms(pod) for pod in snapshot.pods
             if (pod.preferred_pod_affinity or pod.preferred_pod_anti_affinity) and pod.is_pending}
    while True:
        snap = preferences_as_required(snapshot, terms, relaxed)
        soft = {key: frozenset(term for _, term in kept[relaxed.get(key, 0):]) for key, kept in terms.items()}
        result = Scheduler(snap, unavailable, prepared=prepared, soft=soft).run()
        stuck = [unplaced.pod for unplaced in result.unschedulable
                 if relaxed.get(unplaced.pod, 0) < len(terms.get(unplaced.pod, ()))]
        if not stuck:
            break
        for key in stuck:
            relaxed[key] = relaxed.get(key, 0) + 1
    result.solve_seconds = timer() - start if timer else 0.0
    return result


def preferred_terms(pod: Pod) -> list[tuple[str, PodAffinityTerm]]:
    """A pending pod's preferred pod (anti-)affinity terms in the order they are given up: affinity
    before anti-affinity (Karpenter's order), the lowest weight first within each."""
    affinity = [("affinity", term) for _, term in sorted(pod.preferred_pod_affinity, key=lambda pair: pair[0])]
    anti = [("anti", term) for _, term in sorted(pod.preferred_pod_anti_affinity, key=lambda pair: pair[0])]
    return affinity + anti


def preferences_as_required(snapshot: PlanInput, terms: Mapping[str, list[tuple[str, PodAffinityTerm]]],
                            relaxed: Mapping[str, int]) -> PlanInput:
    """The snapshot with the preferred pod (anti-)affinity ``terms`` of each pending pod taken as
    required, less the first ``relaxed[pod]`` it has given up; the snapshot itself when there are none."""
    if not terms:
        return snapshot
    pods = []
    for pod in snapshot.pods:
        if pod.is_pending and pod.key in terms:
            kept = terms[pod.key][relaxed.get(pod.key, 0):]
            pods.append(replace(
                pod, preferred_pod_affinity=(), preferred_pod_anti_affinity=(),
                pod_affinity=pod.pod_affinity + tuple(term for kind, term in kept if kind == "affinity"),
                pod_anti_affinity=pod.pod_anti_affinity + tuple(term for kind, term in kept if kind == "anti")))
        else:
            pods.append(pod)
    return replace(snapshot, pods=pods)
