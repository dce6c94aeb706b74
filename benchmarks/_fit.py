"""An independent fit check for planned nodes: could kube-scheduler bind each node's pods to it?

It judges both planners (ours and Karpenter's), so it imports nothing computational from ``autoscaler.*``:
it reads the raw snapshot (``kubectl get -o json`` objects and ``aws ec2 describe-instance-types`` output);
what a pod requests, selectors, node affinity and tolerations are the simulation's kube-scheduler oracle's
(``simulator/sim/pod_resources.py`` and ``selectors.py``, held to the real kube-scheduler by
tests/simulator/test_oracle_contract.py), so the two judges cannot disagree on them. A planned node is
(instance type, zone, capacity type, NodePool, pods).

Checked per node: requests of its pods plus the DaemonSet pods that would run there (template tolerates
the node's taints and matches its labels) within allocatable, for cpu, memory, pods and nvidia.com/gpu;
the instance type, zone and capacity type satisfy the NodePool's requirements; every pod tolerates the
node's taints and matches its nodeSelector and required node affinity; required pod anti-affinity with
topology key hostname holds on the node. Checked over the whole result: DoNotSchedule topology spread
(zone and hostname) of a self-selecting group has max - min <= maxSkew over the domains the pod may use
(counting bound pods and either only the pending pods under that constraint or every pending pod the
selector matches: the two binding orders), and required zone pod
affinity admits a binding order (every pending pod of a group in one zone unless a bound match exists).

Allocatable follows the EKS-optimised AMI (AL2023) as Karpenter's AWS provider states it: memory less 7.5%
VM overhead (and 64Mi on arm64), max pods = ENIs x (IPv4 per ENI - 1) + 2, kube-reserved CPU
6/1/0.5/0.5/0.25% per core and memory 255Mi + 11Mi x max pods, eviction memory.available 100Mi.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simulator.sim.pod_resources import pod_requests
from simulator.sim.pod_resources import quantity as parse_quantity
from simulator.sim.selectors import (
    label_selector_matches,
    match_expression,
    required_node_affinity,
    untolerated_taint,
)

Raw = Mapping[str, Any]
MI = 2**20
GPU = "nvidia.com/gpu"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODEPOOL = "karpenter.sh/nodepool"


def quantity(value: Any, *, millis: bool = False) -> int:
    """A Kubernetes quantity as an int, rounded up (CPU in millicores when ``millis``)."""
    return math.ceil(parse_quantity(value) * (1000 if millis else 1))


def _requests(spec: Raw) -> dict[str, int]:
    """What a pod asks of a node as kube-scheduler's fit counts it (the oracle's ``pod_requests``: init and
    sidecar containers, pod-level resources, overhead, one pod slot), in millicores and base units."""
    return {name: quantity(value, millis=name == "cpu") for name, value in pod_requests({"spec": spec}).items()}


@dataclass(frozen=True)
class TypeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]


def type_info(raw: Raw) -> TypeInfo:
    name = str(raw["InstanceType"])
    vcpus = int(raw["VCpuInfo"]["DefaultVCpus"])
    arch = (raw.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ["x86_64"]
    arch_label = "arm64" if arch[0] == "arm64" else "amd64"
    mem_mib = int(raw["MemoryInfo"]["SizeInMiB"]) - (64 if arch_label == "arm64" else 0)
    mem_mib -= math.ceil(mem_mib * 0.075)
    net = raw.get("NetworkInfo") or {}
    cards = net.get("NetworkCards") or []
    idx = net.get("DefaultNetworkCardIndex")
    enis = int(cards[idx]["MaximumNetworkInterfaces"]) if cards and idx is not None else int(
        net.get("MaximumNetworkInterfaces", 0))
    max_pods = enis * (int(net.get("Ipv4AddressesPerInterface", 0)) - 1) + 2
    cpu_reserved = math.ceil(sum(60 if c == 0 else 10 if c == 1 else 5 if c < 4 else 2.5 for c in range(vcpus)))
    gpus = sum(int(g.get("Count", 0)) for g in (raw.get("GpuInfo") or {}).get("Gpus") or ()
               if str(g.get("Manufacturer", "")).upper() == "NVIDIA")
    alloc = {"cpu": vcpus * 1000 - cpu_reserved, "memory": (mem_mib - 255 - 11 * max_pods - 100) * MI,
             "pods": max_pods, GPU: gpus}
    family, _, size = name.partition(".")
    m = re.match(r"^([a-z]+?)(\d+)", family)
    labels = {"node.kubernetes.io/instance-type": name, "kubernetes.io/arch": arch_label,
              "kubernetes.io/os": "linux", "karpenter.k8s.aws/instance-family": family,
              "karpenter.k8s.aws/instance-size": size, "karpenter.k8s.aws/instance-cpu": str(vcpus)}
    if m:
        labels["karpenter.k8s.aws/instance-category"] = m.group(1)
        labels["karpenter.k8s.aws/instance-generation"] = m.group(2)
    return TypeInfo(name, labels, alloc)


def _node_affinity_ok(spec: Raw, labels: Mapping[str, str]) -> bool:
    """nodeSelector and required node affinity against a node's labels (the oracle's NodeAffinity filter)."""
    return required_node_affinity({"spec": spec}, {"metadata": {"name": labels.get(HOST, ""), "labels": labels}})


def _tolerates(spec: Raw, taints: Sequence[Raw]) -> bool:
    """Every NoSchedule/NoExecute taint tolerated (the oracle's TaintToleration filter)."""
    return untolerated_taint({"spec": spec}, taints) is None


@dataclass
class Node:
    """One node of a result: planned (instance type set) or existing (``existing`` set)."""
    name: str
    labels: dict[str, str]
    taints: list[Raw]
    allocatable: dict[str, int]
    pods: list[str] = field(default_factory=list)  # pending pods the planner put here
    bound: list[str] = field(default_factory=list)  # pods already running here (existing nodes)
    node_pool: str = ""
    planned: bool = True


@dataclass
class FitResult:
    nodes: int
    violations: list[str]

    @property
    def ok(self) -> bool:
        return not self.violations


class FitCheck:
    """Built once per snapshot; ``check`` judges one planner's result."""

    def __init__(self, snapshot: Raw) -> None:
        self.types = {t.name: t for t in (type_info(r) for r in snapshot["instanceTypes"])}
        self.pools = {p["metadata"]["name"]: p for p in snapshot.get("nodePools") or ()}
        self.pods = {f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}": p
                     for p in snapshot.get("pods") or ()}
        self.requests = {k: _requests(p["spec"]) for k, p in self.pods.items()}
        # Each DaemonSet's pod template with its requests, worked out once for every planned node.
        self.daemonsets = [(d["spec"]["template"], _requests(d["spec"]["template"]["spec"]))
                           for d in snapshot.get("daemonSets") or ()]
        self.existing = {n["metadata"]["name"]: n for n in snapshot.get("nodes") or ()}
        self._by_label: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        self._by_namespace: dict[str, list[str]] = defaultdict(list)
        for k, p in self.pods.items():
            ns = p["metadata"].get("namespace", "default")
            self._by_namespace[ns].append(k)
            for label, value in (p["metadata"].get("labels") or {}).items():
                self._by_label[(ns, label, value)].append(k)

    def _pool_allows(self, pool: Raw, labels: Mapping[str, str]) -> bool:
        reqs = pool["spec"]["template"]["spec"].get("requirements") or ()
        return all(match_expression(r, labels) for r in reqs)

    def nodes(self, planned: Iterable[Mapping[str, Any]], existing: Mapping[str, Sequence[str]]) -> list[Node]:
        """``planned``: dicts with instanceType, zone, capacityType, nodePool, pods."""
        out = []
        for i, p in enumerate(planned):
            t = self.types[p["instanceType"]]
            pool = self.pools[p["nodePool"]]
            tmpl = pool["spec"]["template"]
            labels = {**t.labels, ZONE: p["zone"], CAPACITY_TYPE: p["capacityType"], NODEPOOL: p["nodePool"],
                      HOST: f"planned-{i}", **((tmpl.get("metadata") or {}).get("labels") or {})}
            out.append(Node(f"planned-{i}", labels, list(tmpl["spec"].get("taints") or ()), dict(t.allocatable),
                            pods=list(p["pods"]), node_pool=p["nodePool"]))
        bound: dict[str, list[str]] = defaultdict(list)
        for k, pod in self.pods.items():
            if pod["spec"].get("nodeName"):
                bound[pod["spec"]["nodeName"]].append(k)
        for name, raw in self.existing.items():
            alloc = {k: quantity(v, millis=k == "cpu") for k, v in (raw.get("status") or {}).get(
                "allocatable", {}).items()}
            out.append(Node(name, dict(raw["metadata"].get("labels") or {}), list(raw["spec"].get("taints") or ()),
                            alloc, pods=list(existing.get(name, ())), bound=bound.get(name, []), planned=False))
        return out

    def check(self, planned: Iterable[Mapping[str, Any]], existing: Mapping[str, Sequence[str]]) -> FitResult:
        nodes = self.nodes(planned, existing)
        bad: list[str] = []
        where: dict[str, Node] = {}
        for n in nodes:
            for k in n.pods + n.bound:
                if k in where and k in n.pods:
                    bad.append(f"{k}: placed twice ({where[k].name}, {n.name})")
                where[k] = n
        for n in nodes:
            bad += self._node(n)
        bad += self._spread_and_affinity(nodes, where)
        return FitResult(sum(1 for n in nodes if n.planned), bad)

    def packing(self, planned: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """How full a plan's new nodes are: their vCPUs, and the share of their allocatable CPU and memory the
        pods put on them and their DaemonSet pods request. With the $/h this says why one plan costs more
        than another: more vCPUs bought (emptier nodes) or dearer vCPUs."""
        nodes = [n for n in self.nodes(planned, {}) if n.planned]
        used: dict[str, int] = defaultdict(int)
        alloc: dict[str, int] = defaultdict(int)
        for n in nodes:
            here = self._used(n)
            for r in ("cpu", "memory"):
                used[r] += here.get(r, 0)
                alloc[r] += n.allocatable.get(r, 0)
        return {"vcpus": sum(int(n.labels["karpenter.k8s.aws/instance-cpu"]) for n in nodes),
                "cpuRequestedShare": round(used["cpu"] / alloc["cpu"], 4) if alloc["cpu"] else None,
                "memoryRequestedShare": round(used["memory"] / alloc["memory"], 4) if alloc["memory"] else None}

    def _used(self, n: Node) -> dict[str, int]:
        """What the pods on ``n`` request, with a planned node's DaemonSet pods."""
        used: dict[str, int] = defaultdict(int)
        for k in n.pods + n.bound:
            for r, v in self.requests[k].items():
                used[r] += v
        if n.planned:  # an existing node's DaemonSet pods are among its bound pods
            for tmpl, requests in self.daemonsets:
                if _tolerates(tmpl["spec"], n.taints) and _node_affinity_ok(tmpl["spec"], n.labels):
                    for r, v in requests.items():
                        used[r] += v
        return used

    def _node(self, n: Node) -> list[str]:
        bad = []
        if n.planned and not self._pool_allows(self.pools[n.node_pool], n.labels):
            bad.append(f"{n.name}: {n.labels['node.kubernetes.io/instance-type']} in {n.labels[ZONE]} "
                       f"({n.labels[CAPACITY_TYPE]}) is not allowed by NodePool {n.node_pool}")
        used = self._used(n)
        for r, v in used.items():
            if v > n.allocatable.get(r, 0):
                bad.append(f"{n.name}: {r} requested {v} > allocatable {n.allocatable.get(r, 0)}")
        for k in n.pods:
            spec = self.pods[k]["spec"]
            if not _tolerates(spec, n.taints):
                bad.append(f"{n.name}: {k} does not tolerate the node's taints")
            if not _node_affinity_ok(spec, n.labels):
                bad.append(f"{n.name}: {k} node selector / affinity does not match")
        here = n.pods + n.bound
        for k in n.pods:
            pod = self.pods[k]
            for term in (((pod["spec"].get("affinity") or {}).get("podAntiAffinity") or {})
                         .get("requiredDuringSchedulingIgnoredDuringExecution") or ()):
                if term.get("topologyKey") != HOST:
                    continue
                ns = pod["metadata"].get("namespace", "default")
                clash = [o for o in here if o != k and o.split("/")[0] == ns
                         and label_selector_matches(term.get("labelSelector"),
                                                    self.pods[o]["metadata"].get("labels") or {})]
                if clash:
                    bad.append(f"{n.name}: {k} has hostname anti-affinity to {clash[0]} on the same node")
        return bad

    def _matching(self, ns: str, selector: Raw | None) -> list[str]:
        """Pods of ``ns`` a label selector matches, found through the (namespace, label, value) index."""
        if selector is None:
            return []
        wanted = [(ns, k, v) for k, v in (selector.get("matchLabels") or {}).items()]
        if wanted:
            candidates = min((self._by_label.get(w, ()) for w in wanted), key=len)
        else:
            candidates = self._by_namespace.get(ns, ())
        return [k for k in candidates if label_selector_matches(selector, self.pods[k]["metadata"].get("labels") or {})]

    def _spread_and_affinity(self, nodes: list[Node], where: Mapping[str, Node]) -> list[str]:
        bad = []
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)  # (namespace, constraint) -> pending pods
        constraint: dict[tuple[str, str], Raw] = {}
        affinity: dict[tuple[str, str], list[str]] = defaultdict(list)
        for k, pod in self.pods.items():
            if k not in where or k not in where[k].pods:
                continue
            spec, ns = pod["spec"], pod["metadata"].get("namespace", "default")
            for c in spec.get("topologySpreadConstraints") or ():
                if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule":
                    sig = (ns, repr(sorted(c.items())) + repr(spec.get("nodeSelector")) + repr(spec.get("affinity")))
                    groups[sig].append(k)
                    constraint[sig] = c
            for term in (((spec.get("affinity") or {}).get("podAffinity") or {})
                         .get("requiredDuringSchedulingIgnoredDuringExecution") or ()):
                if term.get("topologyKey") == ZONE:
                    affinity[(ns, repr(term))].append(k)
                    constraint[(ns, repr(term))] = term
        domains: dict[tuple[str, str], set[str]] = {}  # (affinity signature, key) -> domains of eligible nodes
        for sig, members in groups.items():
            c, ns = constraint[sig], sig[0]
            spec = self.pods[members[0]]["spec"]
            tkey = c["topologyKey"]
            dkey = (repr(spec.get("nodeSelector")) + repr(spec.get("affinity")), tkey)
            if dkey not in domains:
                domains[dkey] = {n.labels[tkey] for n in nodes if tkey in n.labels
                                 and _node_affinity_ok(spec, n.labels)}
            matching = self._matching(ns, c.get("labelSelector"))
            stuck = _binding_order(domains[dkey], tkey, max_skew=int(c.get("maxSkew", 1)), members=members,
                                   matching=set(matching), where=where)
            if stuck is not None:
                bad.append(f"{members[0]} (+{len(members) - 1}): topology spread on {tkey}: no binding order "
                           f"keeps skew <= {c.get('maxSkew', 1)} ({stuck})")
        bound = [(o, n) for n in nodes for o in n.bound]
        for sig, members in affinity.items():
            term, ns = constraint[sig], sig[0]
            sel = term.get("labelSelector")
            seeds = {n.labels.get(ZONE) for o, n in bound if o.split("/")[0] == ns
                     and label_selector_matches(sel, self.pods[o]["metadata"].get("labels") or {})}
            pending_zones = {where[o].labels.get(ZONE) for o in members}
            if len(pending_zones - seeds) > (0 if seeds else 1):
                bad.append(f"{members[0]} (+{len(members) - 1}): zone pod affinity group spans zones "
                           f"{sorted(map(str, pending_zones))}")
        return bad


def _binding_order(domains: set[str], tkey: str, *, max_skew: int, members: Sequence[str], matching: set[str],
                   where: Mapping[str, Node]) -> str | None:
    """Whether kube-scheduler could bind a spread group's pods where the plan puts them, in some order.

    kube-scheduler admits a pod into domain d when count(d) + (1 if the pod matches its own selector) -
    min over the eligible domains <= maxSkew, counting the pods the selector matches that are bound at that
    moment; so whether a plan is bindable depends on the order in which its pods bind. Pods already running
    count from the start. The search is greedy: bind every admissible constrained pod that matches nothing
    (it changes no count), then the admissible self-matching one in the least-filled domain; when none is
    admissible, bind a pending pod the selector matches but the constraint does not govern into a
    least-filled domain (it can only raise the minimum); stuck with constrained pods left means no order
    was found. Returns None when one was, else what was left."""
    counts = dict.fromkeys(domains, 0)
    group = set(members)
    free: dict[str, int] = defaultdict(int)  # matching pending pods this constraint does not govern, by domain
    for o in matching:
        node = where.get(o)
        if node is None or node.labels.get(tkey) not in counts:
            continue
        if o in node.bound:
            counts[node.labels[tkey]] += 1
        elif o in node.pods and o not in group:
            free[node.labels[tkey]] += 1
    own: dict[str, int] = defaultdict(int)  # constrained pods that match their own selector, by domain
    other: dict[str, int] = defaultdict(int)  # constrained pods that do not
    for o in members:
        domain = where[o].labels.get(tkey)
        if domain not in counts:
            return f"{o} is on a node outside the constraint's domains"
        (own if o in matching else other)[domain] += 1
    if not counts:
        return None
    levels = Counter(counts.values())  # how many domains hold each count: the minimum without a scan
    low = min(levels)
    while own or other:
        for domain in [d for d in other if counts[d] - low <= max_skew]:
            del other[domain]
        best = min((d for d in own if counts[d] + 1 - low <= max_skew), key=counts.__getitem__, default=None)
        if best is None:
            if not own and not other:
                break
            best = next((d for d, left in free.items() if left and counts[d] == low), None)
            if best is None:
                waiting = sum(own.values()) + sum(other.values())
                return f"{waiting} pod(s) left, domain counts {low}..{max(levels)}"
            free[best] -= 1
        else:
            own[best] -= 1
            if not own[best]:
                del own[best]
        levels[counts[best]] -= 1
        if not levels[counts[best]]:
            del levels[counts[best]]
            if counts[best] == low:
                low += 1
        counts[best] += 1
        levels[counts[best]] += 1
    return None
