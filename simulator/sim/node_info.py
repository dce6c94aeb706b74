"""``NodeInfo``: a node as the simulation's kube-scheduler oracle (``simulator/sim/scheduler.py``) sees it,
with the pods bound to it and what they request, kept up to date as pods are added."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from simulator.sim.pod_resources import NON_ZERO_DEFAULTS, add_to, pod_requests, score_requests, score_units
from simulator.sim.selectors import labels_of

Obj = Mapping[str, Any]
_ZERO = Decimal(0)


def anti_affinity_terms(pod: Obj) -> Sequence[Obj]:
    """The pod's required pod anti-affinity terms."""
    return ((((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution") or ())


def is_active(pod: Obj) -> bool:
    """Not being deleted and not finished: what the affinity, spread and port filters count."""
    return not pod["metadata"].get("deletionTimestamp") and \
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


@dataclass
class NodeInfo:
    """A node and its pods; ``active`` (not terminating, not finished) and ``anti`` (active pods with
    required anti-affinity) are indexes of ``pods`` kept as pods are added, so the affinity and spread
    filters do not re-read every pod of the cluster for every node they test. ``requested`` is what the fit
    reads, ``non_zero`` the cpu and memory the score reads (``score_requests``)."""

    node: Obj
    allocatable: dict[str, Decimal]
    requested: dict[str, Decimal] = field(default_factory=dict)
    non_zero: dict[str, Decimal] = field(default_factory=dict)
    pods: list[Obj] = field(default_factory=list)
    active: list[Obj] = field(default_factory=list)
    anti: list[Obj] = field(default_factory=list)
    name: str = field(init=False)
    # allocatable cpu (millicores) and memory (bytes) as kube-scheduler's integers: the score's denominators
    scale: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.name = str(self.node["metadata"]["name"])
        self.scale = {r: score_units(r, self.allocatable.get(r, _ZERO)) for r in NON_ZERO_DEFAULTS}

    @property
    def labels(self) -> Mapping[str, str]:
        return labels_of(self.node)

    def add(self, pod: Obj, requests: Mapping[str, Decimal] | None = None,
            non_zero: Mapping[str, Decimal] | None = None) -> None:
        self.pods.append(pod)
        if is_active(pod):
            self.active.append(pod)
            if anti_affinity_terms(pod):
                self.anti.append(pod)
        add_to(self.requested, pod_requests(pod) if requests is None else requests)
        add_to(self.non_zero, score_requests(pod) if non_zero is None else non_zero)
