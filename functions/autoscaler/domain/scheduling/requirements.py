"""Node requirements as the planner matches them: a requirement against a node's labels or a NodePool's
requirements on a custom key, the instance-type list that meets ``minValues``, and their wording."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from autoscaler.domain import resources as res
from autoscaler.domain.allocatable import GI
from autoscaler.domain.keys import ZONE_KEYS, ZONE_LABEL
from autoscaler.domain.models import Pod, Requirement, Taint, Toleration
from autoscaler.domain.nodepool import requirement_allows
from autoscaler.domain.scheduling.pool_type import PoolType

MAX_INSTANCE_TYPES = 60

Variant = tuple[Requirement, ...]  # one set of node requirements a pod may be placed by


def label_satisfies(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies ``requirement`` (either zone key reads the zone)."""
    if requirement.key in ZONE_KEYS:
        return requirement_allows(requirement, labels.get(ZONE_LABEL, labels.get(requirement.key)))
    return requirement_allows(requirement, labels.get(requirement.key))


def intersect(pod: Requirement, pool_requirements: list[Requirement]) -> str | bool:
    """Whether a pod requirement on a NodePool-defined key can hold; the label value a new node gets
    when one is decided (str), True when compatible without a single value, False when impossible."""
    allowed: set[str] | None = None
    denied: set[str] = set()
    must_exist = False
    for requirement in pool_requirements:
        if requirement.operator == "In":
            allowed = set(requirement.values) if allowed is None else allowed & set(requirement.values)
            must_exist = True
        elif requirement.operator == "NotIn":
            denied |= set(requirement.values)
        elif requirement.operator == "Exists":
            must_exist = True
        elif requirement.operator == "DoesNotExist":
            return pod.operator in ("NotIn", "DoesNotExist")
    if pod.operator == "In":
        values = set(pod.values) - denied
        if allowed is not None:
            values &= allowed
        return min(values) if values else False
    if pod.operator == "NotIn":
        if allowed is not None:
            left = allowed - set(pod.values)
            return min(left) if left else False
        return True
    if pod.operator == "DoesNotExist":
        return not must_exist
    if pod.operator == "Exists":
        return min(allowed) if allowed else True
    if allowed is not None:
        matching = sorted(value for value in allowed if requirement_allows(pod, value))
        return matching[0] if matching else False
    return False


def with_min_values(types: list[PoolType], requirements: Iterable[Requirement]) -> list[PoolType] | None:
    """The cheapest ``MAX_INSTANCE_TYPES`` types, extended (then trimmed) so that every requirement's
    ``minValues`` is met by distinct label values; None when the fitting types cannot meet it."""
    chosen = types[:MAX_INSTANCE_TYPES]
    for requirement in requirements:
        if not requirement.min_values:
            continue
        values = {pool_type.labels.get(requirement.key) for pool_type in chosen}
        if len(values) >= requirement.min_values:
            continue
        for extra in types[MAX_INSTANCE_TYPES:]:
            if extra.labels.get(requirement.key) not in values:
                chosen = [*chosen[:-1], extra] if len(chosen) >= MAX_INSTANCE_TYPES else [*chosen, extra]
                values = {pool_type.labels.get(requirement.key) for pool_type in chosen}
                if len(values) >= requirement.min_values:
                    break
        if len(values) < requirement.min_values:
            return None
    return chosen


def untolerated_prefer_no_schedule(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> list[Taint]:
    """The PreferNoSchedule taints no toleration covers (kube-scheduler avoids such nodes when it can)."""
    return [taint for taint in taints if taint.effect == "PreferNoSchedule"
            and not any(toleration.tolerates(taint) for toleration in tolerations)]


def single_values(requirements: Iterable[Requirement]) -> dict[str, str]:
    """The labels ``In`` requirements with one value fix."""
    return {requirement.key: requirement.values[0] for requirement in requirements
            if requirement.operator == "In" and len(requirement.values) == 1}


def describe(requirement: Requirement) -> str:
    if requirement.operator in ("Exists", "DoesNotExist"):
        return f"{requirement.key} {requirement.operator}"
    return f"{requirement.key} {requirement.operator} [{', '.join(requirement.values)}]"


def describe_resources(resources: Mapping[str, int]) -> str:
    parts = []
    for key, value in sorted(resources.items()):
        if key == res.PODS:
            continue
        if key == res.CPU:
            parts.append(f"cpu={value}m")
        elif key in (res.MEMORY, res.EPHEMERAL_STORAGE):
            parts.append(f"{key}={value / GI:.2f}Gi")
        else:
            parts.append(f"{key}={value}")
    return ", ".join(parts)


def variants(pod: Pod) -> list[Variant]:
    """Requirement sets to try in order, Karpenter's: the heaviest preferred term with each required
    term in turn, then with the last required term the next heaviest preferred term alone, and so on,
    and finally the last required term without preferences."""
    base = tuple(Requirement(key, "In", (value,)) for key, value in sorted(pod.node_selector.items()))
    terms = [term.requirements for term in pod.required_node_affinity] or [()]
    preferences = [term.requirements for _, term in sorted(pod.preferred_node_affinity, key=lambda pair: -pair[0])]
    if not preferences:
        return [base + term for term in terms]
    out = [base + term + preferences[0] for term in terms]
    out += [base + terms[-1] + preference for preference in preferences[1:]]
    out.append(base + terms[-1])
    return out


def required_variants(pod: Pod) -> list[Variant]:
    """``variants`` without the preferences: node selector plus each required term."""
    base = tuple(Requirement(key, "In", (value,)) for key, value in sorted(pod.node_selector.items()))
    return [base + term.requirements for term in pod.required_node_affinity] or [base]
