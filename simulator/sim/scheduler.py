"""A kube-scheduler oracle for the simulation, on raw Kubernetes JSON.

Written independently of the autoscaler's planner (``autoscaler.domain.scheduling``) on purpose: this is
what decides where pods really land in the simulation, so a bug shared with the planner would hide
itself. It follows the default kube-scheduler profile's filter plugins
(https://kubernetes.io/docs/reference/scheduling/config/#scheduling-plugins):

- NodeUnschedulable, NodeResourcesFit (requests as the API server defaults them from limits, init
  containers' peak, sidecars, pod-level requests, pod overhead, extended resources, pod slots),
  NodeAffinity (nodeSelector and required node affinity), TaintToleration (NoSchedule and NoExecute),
  NodePorts, VolumeZone (PV zone labels and PV node affinity), PodTopologySpread (``DoNotSchedule``
  constraints: maxSkew, minDomains, matchLabelKeys, the node inclusion policies), InterPodAffinity
  (required affinity and anti-affinity, both the incoming pod's and the existing pods' anti-affinity, with
  the terms' namespaces and namespace selectors);

and scores feasible nodes with NodeResourcesFit's ``LeastAllocated`` (the default) or ``MostAllocated``
strategy over cpu and memory, in kube-scheduler's integer arithmetic and on its non-zero requests (a
container without a cpu or memory request counts 100m / 200Mi in the score, never in the fit).
``tests/simulator/test_oracle_contract.py`` holds all of this to the real kube-scheduler, case by case.

Intentional simplifications, harmless to the simulation's verdicts (pinned by tests in
``tests/simulator/test_sim_scheduler.py``): ties are broken by node name (kube-scheduler breaks them at
random; the simulation must be repeatable); the other score plugins of the default profile
(NodeResourcesBalancedAllocation, TaintToleration's PreferNoSchedule, preferred node and pod affinity,
ScheduleAnyway spread, ImageLocality) are not modelled, so where only they would separate feasible nodes
the oracle's choice is still a node kube-scheduler deems feasible; preemption is not modelled.
Pods are taken in queue order: priority, then creation time. From 100 nodes on, as kube-scheduler's
default ``percentageOfNodesToScore`` has it, the filtering of a pod stops once ``feasible_nodes_to_find``
nodes passed (about 46 % of 500 nodes), starting where the previous pod's search stopped, and only those
are scored.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from simulator.sim.node_info import NodeInfo, anti_affinity_terms
from simulator.sim.pod_resources import pod_requests, quantity, score_requests, score_units
from simulator.sim.selectors import (
    label_selector_matches,
    labels_of,
    node_selector_term_matches,
    required_node_affinity,
    tolerates,
    untolerated_taint,
)

Obj = Mapping[str, Any]
Strategy = Literal["LeastAllocated", "MostAllocated"]

ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
HOSTNAME = "kubernetes.io/hostname"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_ZERO = Decimal(0)
# kube-scheduler's minFeasibleNodesToFind and minFeasibleNodesPercentageToFind (schedule_one.go)
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE = 5


def feasible_nodes_to_find(nodes: int) -> int:
    """kube-scheduler's ``numFeasibleNodesToFind`` with the default (adaptive) percentageOfNodesToScore:
    every node below 100 nodes, else 50 % less 1 % per 125 nodes (at least 5 %), at least 100."""
    if nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return nodes
    percentage = max(50 - nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE)
    return max(nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


# ----- the cluster as the scheduler sees it ------------------------------------------------------
def _host_ports(pod: Obj) -> list[tuple[str, str, int]]:
    """The host ports the pod holds: its app containers' and its sidecars' (restartable init containers run
    for the pod's life; a run-to-completion init container's port is not held), as NodePorts counts them."""
    spec = pod.get("spec") or {}
    out = []
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    for c in (*sidecars, *(spec.get("containers") or ())):
        for port in c.get("ports") or ():
            if port.get("hostPort"):
                out.append((port.get("hostIP") or "0.0.0.0", port.get("protocol") or "TCP", int(port["hostPort"])))
    return out


def _ports_conflict(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    if a[1] != b[1] or a[2] != b[2]:
        return False
    return a[0] == b[0] or "0.0.0.0" in (a[0], b[0])


@dataclass
class Volumes:
    """PersistentVolumeClaims by (namespace, name) and PersistentVolumes by name."""

    claims: dict[tuple[str, str], Obj] = field(default_factory=dict)
    volumes: dict[str, Obj] = field(default_factory=dict)

    @classmethod
    def of(cls, claims: Iterable[Obj], volumes: Iterable[Obj]) -> Volumes:
        return cls({(c["metadata"].get("namespace", "default"), c["metadata"]["name"]): c for c in claims},
                   {v["metadata"]["name"]: v for v in volumes})


@dataclass(frozen=True)
class Decision:
    pod: str  # namespace/name
    node: str | None
    reasons: tuple[str, ...] = ()  # per-plugin counts when unschedulable, kube-scheduler style

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)


def pod_key(pod: Obj) -> str:
    return f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"


class Snapshot:
    """Nodes and the pods bound to them, updated as the scheduler assumes its own bindings. ``namespaces``
    (the Namespace objects) give the labels affinity terms' ``namespaceSelector`` reads; without them a
    non-empty selector is taken to mean the term's own namespace."""

    def __init__(self, nodes: Iterable[Obj], pods: Iterable[Obj], volumes: Volumes | None = None,
                 namespaces: Iterable[Obj] | None = None) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            alloc = {k: quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
            self.nodes[node["metadata"]["name"]] = NodeInfo(node, alloc)
        for pod in pods:
            where = (pod.get("spec") or {}).get("nodeName")
            # Terminating pods still hold their node's resources until the kubelet lets them go.
            if where in self.nodes and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                self.nodes[where].add(pod)
        self.volumes = volumes or Volumes()
        # The API server labels every namespace with its name (kubernetes.io/metadata.name).
        self.namespace_labels: dict[str, Mapping[str, str]] | None = None if namespaces is None else {
            ns["metadata"]["name"]: {NAMESPACE_NAME_LABEL: ns["metadata"]["name"], **labels_of(ns)}
            for ns in namespaces}
        # Where the next pod's filtering starts (kube-scheduler's nextStartNodeIndex): the search stops
        # once enough feasible nodes are found, and the next one goes on from where it stopped.
        self.start = 0
        # Bumped on every pod added: a filter's answer for a pod can only change when this does.
        self.version = 0
        self._requests: dict[int, tuple[Obj, dict[str, Decimal], dict[str, Decimal]]] = {}
        # Filters that read only the pod's spec and the node (not other pods), by pod signature.
        self._static: dict[str, tuple[list[tuple[int, NodeInfo, str | None]], list[int], dict[str, int]]] = {}
        # Every active pod with required anti-affinity, with its node (the InterPodAffinity filter checks
        # them for each incoming pod; usually there are none).
        self.anti: list[tuple[NodeInfo, Obj]] = [(info, p) for info in self.nodes.values() for p in info.anti]
        # The last answer of ``feasible`` per pod signature, with the version it was computed at.
        self._answers: dict[str, tuple[int, int, list[NodeInfo], dict[str, int], int]] = {}

    # ----- filters: each returns None when the node passes, else kube-scheduler's reason -----
    def node_unschedulable(self, pod: Obj, info: NodeInfo) -> str | None:
        if not (info.node.get("spec") or {}).get("unschedulable"):
            return None
        taint = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        if any(tolerates(t, taint) for t in (pod.get("spec") or {}).get("tolerations") or ()):
            return None
        return "node(s) were unschedulable"

    def requests_of(self, pod: Obj) -> dict[str, Decimal]:
        """``pod_requests``, parsed once per pod object."""
        return self._parsed(pod)[1]

    def score_requests_of(self, pod: Obj) -> dict[str, Decimal]:
        """``score_requests``, parsed once per pod object."""
        return self._parsed(pod)[2]

    def _parsed(self, pod: Obj) -> tuple[Obj, dict[str, Decimal], dict[str, Decimal]]:
        cached = self._requests.get(id(pod))
        if cached is None or cached[0] is not pod:
            cached = self._requests[id(pod)] = (pod, pod_requests(pod), score_requests(pod))
        return cached

    def add(self, info: NodeInfo, pod: Obj, requests: Mapping[str, Decimal] | None = None,
            non_zero: Mapping[str, Decimal] | None = None) -> None:
        """Assume ``pod`` on ``info`` (the scheduler's own binding)."""
        before = len(info.anti)
        info.add(pod, self.requests_of(pod) if requests is None else requests,
                 self.score_requests_of(pod) if non_zero is None else non_zero)
        if len(info.anti) > before:
            self.anti.append((info, pod))
        self.version += 1

    def resources_fit(self, pod: Obj, info: NodeInfo) -> str | None:
        for name, want in self.requests_of(pod).items():
            if want <= 0:
                continue
            free = info.allocatable.get(name, Decimal(0)) - info.requested.get(name, Decimal(0))
            if want > free:
                return f"Insufficient {name}" if name != "pods" else "Too many pods"
        return None

    def node_affinity(self, pod: Obj, info: NodeInfo) -> str | None:
        return None if required_node_affinity(pod, info.node) else \
            "node(s) didn't match Pod's node affinity/selector"

    def taint_toleration(self, pod: Obj, info: NodeInfo) -> str | None:
        taint = untolerated_taint(pod, (info.node.get("spec") or {}).get("taints") or ())
        if taint is None:
            return None
        value = f"={taint['value']}" if taint.get("value") else ""
        return f"node(s) had untolerated taint {{{taint.get('key')}{value}: {taint.get('effect')}}}"

    def node_ports(self, pod: Obj, info: NodeInfo) -> str | None:
        wanted = _host_ports(pod)
        if not wanted:
            return None
        used = [p for other in info.active for p in _host_ports(other)]
        if any(_ports_conflict(w, u) for w in wanted for u in used):
            return "node(s) didn't have free ports for the requested pod ports"
        return None

    def volume_zone(self, pod: Obj, info: NodeInfo) -> str | None:
        ns = pod["metadata"].get("namespace", "default")
        for vol in (pod.get("spec") or {}).get("volumes") or ():
            claim_name = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim_name:
                continue
            claim = self.volumes.claims.get((ns, claim_name))
            pv_name = ((claim or {}).get("spec") or {}).get("volumeName")
            pv = self.volumes.volumes.get(pv_name or "")
            if pv is None:
                continue  # unbound (WaitForFirstConsumer): the volume follows the pod
            for key in ZONE_LABELS:
                zones = labels_of(pv).get(key)
                if zones and info.labels.get(key, info.labels.get(ZONE_LABELS[0])) not in zones.split("__"):
                    return "node(s) had no available volume zone"
            required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
            if required and not any(node_selector_term_matches(t, info.node)
                                    for t in required.get("nodeSelectorTerms") or ()):
                return "node(s) had volume node affinity conflict"
        return None

    def topology_spread(self, pod: Obj, info: NodeInfo) -> str | None:
        spec = pod.get("spec") or {}
        for c in spec.get("topologySpreadConstraints") or ():
            if c.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
                continue
            key = c.get("topologyKey", "")
            if key not in info.labels:
                return "node(s) didn't match pod topology spread constraints (missing required label)"
            selector = self._spread_selector(pod, c)
            counts: dict[str, int] = {}
            for other in self.nodes.values():
                if key not in other.labels or not self._spread_eligible(pod, c, other):
                    continue
                domain = other.labels[key]
                counts.setdefault(domain, 0)
                counts[domain] += sum(1 for p in other.active
                                      if p["metadata"].get("namespace") == pod["metadata"].get("namespace")
                                      and label_selector_matches(selector, labels_of(p)))
            counts.setdefault(info.labels[key], 0)
            fewest = min(counts.values())
            if len(counts) < int(c.get("minDomains") or 1):
                fewest = 0
            self_match = 1 if label_selector_matches(selector, labels_of(pod)) else 0
            if counts[info.labels[key]] + self_match - fewest > int(c.get("maxSkew", 1)):
                return "node(s) didn't match pod topology spread constraints"
        return None

    @staticmethod
    def _spread_selector(pod: Obj, constraint: Obj) -> Obj | None:
        selector = constraint.get("labelSelector")
        keys = constraint.get("matchLabelKeys") or ()
        if selector is None or not keys:
            return selector
        labels = labels_of(pod)
        extra = [{"key": k, "operator": "In", "values": [labels[k]]} for k in keys if k in labels]
        return {**selector, "matchExpressions": [*(selector.get("matchExpressions") or ()), *extra]}

    def _spread_eligible(self, pod: Obj, constraint: Obj, info: NodeInfo) -> bool:
        """Which nodes' domains count (nodeAffinityPolicy Honor and nodeTaintsPolicy Ignore by default)."""
        if constraint.get("nodeAffinityPolicy", "Honor") == "Honor" and not required_node_affinity(pod, info.node):
            return False
        return not (constraint.get("nodeTaintsPolicy", "Ignore") == "Honor"
                    and untolerated_taint(pod, (info.node.get("spec") or {}).get("taints") or ()) is not None)

    def inter_pod_affinity(self, pod: Obj, info: NodeInfo) -> str | None:
        affinity = (pod.get("spec") or {}).get("affinity") or {}
        ns = pod["metadata"].get("namespace", "default")
        for term in (affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ():
            key = term.get("topologyKey", "")
            if key not in info.labels:
                return "node(s) didn't match pod affinity rules"
            if self._domain_has_match(term, ns, key, info.labels[key]):
                continue
            # The first pod of a group that selects itself may go anywhere no matching pod exists yet.
            if not self._any_match(term, ns) and self._term_selects(term, ns, pod):
                continue
            return "node(s) didn't match pod affinity rules"
        for term in (affinity.get("podAntiAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ():
            key = term.get("topologyKey", "")
            if key in info.labels and self._domain_has_match(term, ns, key, info.labels[key]):
                return "node(s) didn't match pod anti-affinity rules"
        for other, existing in self.anti:
            for term in anti_affinity_terms(existing):
                key = term.get("topologyKey", "")
                if key in other.labels and info.labels.get(key) == other.labels[key] and \
                        self._term_selects(term, existing["metadata"].get("namespace", "default"), pod):
                    return "node(s) didn't satisfy existing pods anti-affinity rules"
        return None

    def _term_selects(self, term: Obj, owner_ns: str, pod: Obj) -> bool:
        """Whether a pod affinity term selects ``pod``: in its namespaces (``namespaces`` and those
        ``namespaceSelector`` matches, the term owner's own when it names neither) and matching its labels."""
        ns = pod["metadata"].get("namespace", "default")
        names = term.get("namespaces") or ()
        selector = term.get("namespaceSelector")
        if not names and selector is None:
            names = (owner_ns,)
        in_scope = ns in names
        if not in_scope and selector is not None:
            if self.namespace_labels is not None or selector == {}:  # an empty selector: every namespace
                in_scope = label_selector_matches(selector, (self.namespace_labels or {}).get(
                    ns, {NAMESPACE_NAME_LABEL: ns}))
            else:
                in_scope = ns == owner_ns  # namespace labels unknown: the owner's namespace
        return in_scope and label_selector_matches(term.get("labelSelector"), labels_of(pod))

    def _domain_has_match(self, term: Obj, ns: str, key: str, domain: str) -> bool:
        return any(self._term_selects(term, ns, p)
                   for other in self.nodes.values() if other.labels.get(key) == domain for p in other.active)

    def _any_match(self, term: Obj, ns: str) -> bool:
        return any(self._term_selects(term, ns, p) for other in self.nodes.values() for p in other.active)

    FILTERS: tuple[str, ...] = ("node_unschedulable", "node_affinity", "taint_toleration", "node_ports",
                                "resources_fit", "volume_zone", "topology_spread", "inter_pod_affinity")

    def feasible(self, pod: Obj) -> tuple[list[NodeInfo], dict[str, int]]:
        """The nodes passing every filter, and for the others how many failed for each reason.

        Every filter is evaluated as kube-scheduler does, in its order (``FILTERS``), but answers are
        reused where they cannot differ: pods with the same namespace, labels and spec (a Deployment's
        replicas) get the same answer from the same snapshot (no filter reads a pod's name); the pure
        filters' answers for a pod signature hold for the whole snapshot; a filter with nothing to check
        for this pod (no host ports, no spread constraints, no affinity terms and no existing pod's
        anti-affinity) passes without being called."""
        signature = _signature(pod)
        total = len(self.nodes)
        answer = self._answers.get(signature)
        if answer is not None and answer[0] == self.version and answer[1] == self.start:
            self.start = (self.start + answer[4]) % total if total else 0
            return list(answer[2]), dict(answer[3])
        candidates, positions, static_reasons = self._candidates(signature, pod)
        reasons = dict(static_reasons)
        to_find = feasible_nodes_to_find(total)
        first = bisect.bisect_left(positions, self.start)
        last: int | None = None
        spec = pod.get("spec") or {}
        checks = []
        if _host_ports(pod):
            checks.append(self.node_ports)
        want = [(name, v) for name, v in self.requests_of(pod).items() if v > 0]
        after_fit = []
        if spec.get("topologySpreadConstraints"):
            after_fit.append(self.topology_spread)
        if spec.get("affinity") or self.anti:
            after_fit.append(self.inter_pod_affinity)
        ok: list[NodeInfo] = []
        for pos, info, zone_reason in itertools.chain(candidates[first:], candidates[:first]):
            why = None
            for check in checks:
                why = check(pod, info)
                if why is not None:
                    break
            if why is None:
                for name, need in want:
                    if need > info.allocatable.get(name, _ZERO) - info.requested.get(name, _ZERO):
                        why = f"Insufficient {name}" if name != "pods" else "Too many pods"
                        break
            if why is None:
                why = zone_reason
            if why is None:
                for check in after_fit:
                    why = check(pod, info)
                    if why is not None:
                        break
            if why is None:
                ok.append(info)
                if len(ok) >= to_find:
                    last = pos
                    break
            else:
                reasons[why] = reasons.get(why, 0) + 1
        processed = total if last is None else (last - self.start) % total + 1
        self._answers[signature] = (self.version, self.start, list(ok), dict(reasons), processed)
        self.start = (self.start + processed) % total if total else 0
        return ok, reasons

    def _candidates(self, signature: str, pod: Obj
                    ) -> tuple[list[tuple[int, NodeInfo, str | None]], list[int], dict[str, int]]:
        """The pure filters for a pod signature, once per snapshot: the nodes passing NodeUnschedulable,
        NodeAffinity and TaintToleration (each with its VolumeZone answer, checked after the fit), and
        the others' reasons counted."""
        cached = self._static.get(signature)
        if cached is None:
            passing: list[tuple[int, NodeInfo, str | None]] = []
            failed: dict[str, int] = {}
            for pos, info in enumerate(self.nodes.values()):
                why = (self.node_unschedulable(pod, info) or self.node_affinity(pod, info)
                       or self.taint_toleration(pod, info))
                if why is None:
                    passing.append((pos, info, self.volume_zone(pod, info)))
                else:
                    failed[why] = failed.get(why, 0) + 1
            cached = self._static[signature] = (passing, [c[0] for c in passing], failed)
        return cached

    @staticmethod
    def score(pod: Obj, info: NodeInfo, strategy: Strategy, want: Mapping[str, Decimal] | None = None) -> int:
        """NodeResourcesFit's score over cpu and memory (weight 1 each), 0-100, in kube-scheduler's integer
        arithmetic (so its ties are the oracle's ties), on the non-zero requests of the node's pods and of
        ``pod`` (``want``: its ``score_requests`` when already parsed). A resource the node has none of
        is left out of the average."""
        want = score_requests(pod) if want is None else want
        total = counted = 0
        for name, capacity in info.scale.items():
            if capacity <= 0:
                continue
            used = score_units(name, info.non_zero.get(name, _ZERO) + want.get(name, _ZERO))
            if strategy == "LeastAllocated":
                total += 0 if used > capacity else (capacity - used) * 100 // capacity
            else:
                total += min(used, capacity) * 100 // capacity
            counted += 1
        return total // counted if counted else 0


def _signature(pod: Obj) -> str:
    """What the filters read of a pod: its namespace, labels and spec (not its name)."""
    meta = pod.get("metadata") or {}
    return json.dumps([meta.get("namespace", "default"), meta.get("labels") or {}, pod.get("spec") or {}],
                      sort_keys=True, default=str)


def queue_order(pods: Iterable[Obj]) -> list[Obj]:
    """The scheduling queue: higher priority first, then older pods."""
    return sorted(pods, key=lambda p: (-int((p.get("spec") or {}).get("priority") or 0),
                                       p["metadata"].get("creationTimestamp") or "", pod_key(p)))


def wants_scheduling(pod: Obj) -> bool:
    spec = pod.get("spec") or {}
    return (not spec.get("nodeName") and not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
            and not spec.get("schedulingGates")
            and spec.get("schedulerName", "default-scheduler") == "default-scheduler")


def schedule(pending: Sequence[Obj], snapshot: Snapshot, *, strategy: Strategy = "LeastAllocated") -> list[Decision]:
    """Place ``pending`` pods one by one in queue order, each seeing the ones placed before it."""
    out = []
    total = len(snapshot.nodes)
    for pod in queue_order(p for p in pending if wants_scheduling(p)):
        ok, reasons = snapshot.feasible(pod)
        if not ok:
            why = tuple(f"{n} {r}" for r, n in sorted(reasons.items()))
            out.append(Decision(pod_key(pod), None, (f"0/{total} nodes are available", *why)))
            continue
        want = snapshot.score_requests_of(pod)
        best = min(ok, key=lambda info: (-Snapshot.score(pod, info, strategy, want), info.name))
        snapshot.add(best, {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": best.name}},
                     snapshot.requests_of(pod), want)
        out.append(Decision(pod_key(pod), best.name))
    return out
