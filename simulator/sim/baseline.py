"""A Cluster Autoscaler baseline, set up the way an operator sets CA up on EKS today, run on the same
scenario instead of the autoscaler's functions so the two can be compared (dollars, pending time).

Node groups (``groups_for``; the AWS provider's "one ASG per AZ" and mixed-instances guidance,
https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/cloudprovider/aws/README.md):
for every NodePool of the scenario, one Auto Scaling group per zone, per instance family and per size
(``sizes``, default large / xlarge / 2xlarge) and per capacity type the NodePool allows. The families are
those the NodePool allows; when it allows more than one per category (no family requirement), the
cheapest family per vCPU of each category, as an operator would pick one. Each group's mixed instances
policy lists its type and every other type the NodePool allows with the same vCPUs and memory (CA needs one
shape per group); the ASG launches the cheapest of them EC2 has capacity for (lowest-price on-demand,
price-capacity-optimized spot). Groups carry the NodePool's labels and taints (CA's node-template tags).

CA's defaults (https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md): a scan
every 10 s; scale-up for pods kube-scheduler marked unschedulable, after filtering out those the current
nodes can take and counting upcoming nodes first; one group per scan, chosen by the expander: ``priority``
(spot groups above on-demand ones, heavier NodePools above lighter, the operator's usual priority
ConfigMap) with ``least-waste`` among equal priorities, or ``least-waste`` alone. A scale-up EC2 cannot
serve (no capacity for any type of the policy in the group's zone) fails, and the group backs off: 5
minutes, doubling per consecutive failure up to 30 (``--initial-node-group-backoff-duration``,
``--max-node-group-backoff-duration``); the pods go to another group at the next scan. Scale-down: a node
whose requests (DaemonSet pods included) are under 50 % of its allocatable cpu and memory, whose pods
would all fit elsewhere and none of which blocks (a kube-system pod without a PodDisruptionBudget, a pod
with local storage, a pod with no controller, ``safe-to-evict: "false"``), is unneeded; after 10 minutes
it is drained through the Eviction API and terminated, empty nodes together and one non-empty node at a
time, never within 10 minutes of a scale-up.

It judges the product, so it imports nothing computational from ``autoscaler.*``; the template Nodes
come from ``simulator.local.node_manifest`` (the simulated kubelet's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from simulator.ec2_instance import ec2_instance
from simulator.kube_store import Store
from simulator.local import node_manifest, spot_price
from simulator.sim.cloud import CloudWorld, InstanceRecord
from simulator.sim.engine import EventLoop
from simulator.sim.kubelet import BASELINE_GROUP_TAG, BASELINE_LABELS_TAG, BASELINE_NODEPOOL_TAG, BASELINE_TAINTS_TAG
from simulator.sim.nodegroups import ManagedNodeGroups
from simulator.sim.scheduler import Snapshot, schedule, wants_scheduling

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"


@dataclass
class BaselineSettings:
    sizes: tuple[str, ...] = ("large", "xlarge", "2xlarge")
    expander: str = "priority"  # priority (then least-waste) | least-waste
    max_size: int = 100  # per group
    scan_seconds: float = 10.0
    utilization: float = 0.5
    unneeded_seconds: float = 600.0
    delay_after_add_seconds: float = 600.0
    initial_backoff_seconds: float = 300.0
    max_backoff_seconds: float = 1800.0
    skip_nodes_with_system_pods: bool = True
    skip_nodes_with_local_storage: bool = True


@dataclass
class Group:
    """One Auto Scaling group as CA sees it."""

    name: str
    node_pool: str
    zone: str
    capacity_type: str
    instance_types: tuple[str, ...]  # the mixed instances policy; the first is CA's template
    priority: int
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    backoff_until: float = float("-inf")
    failures: int = 0


_NAME = re.compile(r"^([a-z]+)(\d+)([a-z\-]*)\.(.+)$")


def _shape(name: str) -> tuple[str, str, str, str] | None:
    """(category, generation, family, size) of an instance type name, e.g. m6a.xlarge -> m, 6, m6a, xlarge."""
    m = _NAME.match(name)
    if not m:
        return None
    return m.group(1), m.group(2), name.split(".", 1)[0], m.group(4)


def _allows(requirements: Iterable[Any], labels: Mapping[str, str]) -> bool:
    """A NodePool's requirements (key, operator, values) against a node's labels."""
    for r in requirements:
        value, values = labels.get(r.key), [str(v) for v in r.values]
        op = str(r.operator)
        if op == "In" and (value is None or value not in values):
            return False
        if op == "NotIn" and value is not None and value in values:
            return False
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
        if op in ("Gt", "Lt"):
            if value is None or not value.lstrip("-").isdigit():
                return False
            if (op == "Gt" and not int(value) > int(values[0])) or (op == "Lt" and not int(value) < int(values[0])):
                return False
    return True


def groups_for(node_pools: Sequence[Any], instance_types: Mapping[str, Any], zones: Sequence[str], *,
               prices: Mapping[str, float], labels_of: Callable[[str, str, str], Mapping[str, str]],
               settings: BaselineSettings) -> list[Group]:
    """The ASGs an operator would create for these NodePools. ``labels_of(type, zone, capacity type)``: the
    labels a node of that offering gets; ``prices``: on-demand $/h per type (the family choice)."""
    groups: list[Group] = []
    for pool in node_pools:
        if getattr(pool, "is_static", False):
            continue
        for ct in ("spot", "on-demand"):
            allowed = sorted(n for n in instance_types if n in prices and _shape(n)
                             and any(_allows(pool.requirements, labels_of(n, z, ct)) for z in zones))
            if not allowed:
                continue
            by_family: dict[str, list[str]] = {}
            for n in allowed:
                shape = _shape(n)
                assert shape is not None
                by_family.setdefault(shape[2], []).append(n)
            families = _chosen_families(by_family, instance_types, prices)
            for family in families:
                for size in settings.sizes:
                    primary = f"{family}.{size}"
                    if primary not in by_family.get(family, ()):
                        continue
                    it = instance_types[primary]
                    siblings = [n for n in allowed if n != primary and instance_types[n].vcpus == it.vcpus
                                and instance_types[n].memory_mib == it.memory_mib
                                and _shape(n) is not None and _shape(n)[0] == _shape(primary)[0]]  # type: ignore[index]
                    policy = (primary, *sorted(siblings, key=lambda n: (prices[n], n)))
                    for zone in zones:
                        usable = tuple(n for n in policy if _allows(pool.requirements, labels_of(n, zone, ct)))
                        if not usable:
                            continue
                        groups.append(Group(
                            name=f"{pool.name}-{family}-{size}-{ct}-{zone}", node_pool=pool.name, zone=zone,
                            capacity_type=ct, instance_types=usable,
                            priority=int(getattr(pool, "weight", 0) or 0) * 10 + (5 if ct == "spot" else 0),
                            labels=dict(getattr(pool, "labels", {}) or {}),
                            taints=[{"key": t.key, "value": t.value, "effect": str(t.effect)} if t.value else
                                    {"key": t.key, "effect": str(t.effect)} for t in getattr(pool, "taints", ())]))
    return groups


def _chosen_families(by_family: Mapping[str, list[str]], instance_types: Mapping[str, Any],
                     prices: Mapping[str, float]) -> list[str]:
    """Every allowed family when the NodePool names them; else the cheapest per vCPU of each category."""
    if len(by_family) <= 4:
        return sorted(by_family)
    best: dict[str, tuple[float, str]] = {}
    for family, names in by_family.items():
        category = _shape(names[0])[0]  # type: ignore[index]
        per_vcpu = min(prices[n] / max(instance_types[n].vcpus, 1) for n in names)
        if category not in best or (per_vcpu, family) < best[category]:
            best[category] = (per_vcpu, family)
    return sorted(f for _, f in best.values())


@dataclass
class ClusterAutoscaler:
    loop: EventLoop
    store: Store
    cloud: CloudWorld
    drainer: ManagedNodeGroups
    instance_types: Callable[[], Any]
    region: str
    subnets: dict[str, str]
    image_id: str
    settings: BaselineSettings = field(default_factory=BaselineSettings)
    log: Callable[[str, str], None] | None = None
    node_pools: Callable[[], Sequence[Any]] = list
    prices: Callable[[], Mapping[str, float]] = dict
    unneeded_since: dict[str, float] = field(default_factory=dict)
    draining: set[str] = field(default_factory=set)
    last_scale_up: float = float("-inf")
    groups: list[Group] = field(default_factory=list)
    failed_scale_ups: int = 0
    _type_labels: dict[str, dict[str, str]] = field(default_factory=dict)

    def start(self) -> None:
        self.groups = groups_for(self.node_pools(), self.instance_types(), sorted(self.subnets),
                                 prices=self.prices(), labels_of=self._labels, settings=self.settings)
        if self.log is not None:
            kinds = sorted({g.name.removesuffix(f"-{g.zone}") for g in self.groups})
            self.log("cluster-autoscaler", f"{len(self.groups)} node groups: {', '.join(kinds)}, each in "
                                           f"{len(self.subnets)} zones")
        self.loop.every(self.settings.scan_seconds, "cluster-autoscaler", self.scan)

    def _labels(self, itype: str, zone: str, capacity_type: str) -> dict[str, str]:
        if itype not in self._type_labels:
            self._type_labels[itype] = dict(self._node(itype, zone, capacity_type, 0)["metadata"]["labels"])
        return {**self._type_labels[itype], ZONE: zone, CAPACITY_TYPE: capacity_type}

    def _node(self, itype: str, zone: str, capacity_type: str, index: int, group: Group | None = None) -> dict[
            str, Any]:
        inst = ec2_instance({"InstanceId": f"template-{index}", "InstanceType": itype,
                                  "Placement": {"AvailabilityZone": zone},
                                  "PrivateDnsName": f"template-{group.name if group else itype}-{index}.internal"})
        node = node_manifest(inst, region=self.region)
        labels = node["metadata"]["labels"]
        labels.pop("karpenter.sh/nodepool", None)
        labels[CAPACITY_TYPE] = capacity_type
        node["spec"]["taints"] = []
        if group is not None:
            labels.update(group.labels)
            labels["eks.amazonaws.com/nodegroup"] = group.name
            node["spec"]["taints"] = [dict(t) for t in group.taints]
        return node

    def _members(self, group: Group | None = None) -> list[InstanceRecord]:
        names = {g.name for g in self.groups} if group is None else {group.name}
        return [r for r in self.cloud.live()
                if r.instance is not None and r.instance.tags.get(BASELINE_GROUP_TAG) in names]

    def scan(self) -> None:
        pods = self.store.view("pods")
        nodes = self.store.view("nodes")
        self._scale_up(pods, nodes)
        self._scale_down(pods, nodes)

    # ----- scale-up ------------------------------------------------------------------------------
    def _scale_up(self, pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> None:
        pending = [p for p in pods if wants_scheduling(p) and _marked_unschedulable(p)]
        if not pending:
            return
        # FilterOutSchedulable: pods that fit on the nodes as they are now wait for kube-scheduler.
        fits = {d.pod for d in schedule(pending, Snapshot(nodes, pods)) if d.node is not None}
        pending = [p for p in pending if _key(p) not in fits]
        if not pending:
            return
        # Upcoming nodes (launched, not Ready yet) count as capacity first, as CA's templates of them.
        ready = {n["metadata"]["name"] for n in nodes if _is_ready(n)}
        upcoming = []
        for g in self.groups:
            for i, r in enumerate(self._members(g)):
                if r.node_name is None or r.node_name not in ready:
                    itype = r.instance.instance_type if r.instance else g.instance_types[0]
                    upcoming.append(self._node(itype, g.zone, g.capacity_type, 10_000 + i, g))
        if upcoming:
            placed = {d.pod for d in schedule(pending, Snapshot(upcoming, [])) if d.node is not None}
            pending = [p for p in pending if _key(p) not in placed]
        if not pending:
            return
        options = []
        # Groups differing only in zone estimate alike unless a pending pod cares about zones.
        zonal = any(ZONE in repr(p["spec"]) for p in pending)
        estimates: dict[tuple[Any, ...], tuple[int, int, tuple[float, float]]] = {}
        for g in self.groups:
            if self.loop.now < g.backoff_until:
                continue
            room = self.settings.max_size - len(self._members(g))
            if room <= 0:
                continue
            key = (g.instance_types[0], g.capacity_type, g.node_pool, g.zone if zonal else "*", room)
            if key not in estimates:
                estimates[key] = self._estimate(g, pending, room)
            count, placed, waste = estimates[key]
            if count:
                options.append((g, count, placed, waste))
        if not options:
            return
        group, count, placed, waste = expand(options, self.settings.expander)
        launched = self._launch(group, count)
        if launched == 0:
            self.failed_scale_ups += 1
            group.failures += 1
            backoff = backoff_seconds(group.failures, self.settings)
            group.backoff_until = self.loop.now + backoff
            if self.log is not None:
                self.log("cluster-autoscaler", f"scale-up of {group.name} failed (no capacity for "
                                               f"{', '.join(group.instance_types)}): backing off {backoff:.0f} s")
            return
        group.failures = 0
        if self.log is not None:
            self.log("cluster-autoscaler", f"scale-up: {group.name} +{launched} for {placed} of {len(pending)} "
                                           f"unschedulable pod(s) (idle cpu {waste[0]:.2f}, memory {waste[1]:.2f})")

    def _estimate(self, group: Group, pending: list[dict[str, Any]], room: int) -> tuple[int, int, tuple[float, float]]:
        """CA's binpacking estimator: the fewest template nodes placing the most pods, and the waste
        (idle share of CPU, then of memory: least-waste's order)."""
        best_count, best_placed = 0, 0
        for count in range(1, min(room, len(pending)) + 1):
            templates = [self._node(group.instance_types[0], group.zone, group.capacity_type, i, group)
                         for i in range(count)]
            placed = sum(1 for d in schedule(pending, Snapshot(templates, [])) if d.node is not None)
            if placed <= best_placed:
                break
            best_count, best_placed = count, placed
            if placed == len(pending):
                break
        if not best_count:
            return 0, 0, (1.0, 1.0)
        templates = [self._node(group.instance_types[0], group.zone, group.capacity_type, i, group)
                     for i in range(best_count)]
        snap = Snapshot(templates, [])
        schedule(pending, snap)
        idle = []
        for r in ("cpu", "memory"):
            alloc = sum((i.allocatable.get(r, Decimal(0)) for i in snap.nodes.values()), Decimal(0))
            used = sum((i.requested.get(r, Decimal(0)) for i in snap.nodes.values()), Decimal(0))
            idle.append(float((alloc - used) / alloc) if alloc else 1.0)
        return best_count, best_placed, (round(idle[0], 6), round(idle[1], 6))

    def _launch(self, group: Group, count: int) -> int:
        """The ASG's launch: the cheapest type of its policy EC2 has capacity for in its zone."""
        od = self.prices()

        def price(t: str) -> float:
            base = od.get(t, float("inf"))
            return spot_price(t, group.zone, base) if group.capacity_type == "spot" and t in od else base

        usable = [t for t in group.instance_types if not self._blocked(t, group.zone, group.capacity_type)]
        if not usable:
            return 0
        itype = min(usable, key=lambda t: (price(t), t))
        spot = {"InstanceMarketOptions": {"MarketType": "spot"}} if group.capacity_type == "spot" else {}
        for _ in range(count):
            self.cloud.ec2.run_instances(
                ImageId=self.image_id, InstanceType=itype, MinCount=1, MaxCount=1,
                SubnetId=self.subnets[group.zone], **spot,
                TagSpecifications=[{"ResourceType": "instance", "Tags": [
                    {"Key": BASELINE_GROUP_TAG, "Value": group.name},
                    {"Key": BASELINE_NODEPOOL_TAG, "Value": group.node_pool},
                    {"Key": BASELINE_LABELS_TAG, "Value": json.dumps(group.labels, sort_keys=True)},
                    {"Key": BASELINE_TAINTS_TAG, "Value": json.dumps(group.taints)}]}])
        self.last_scale_up = self.loop.now
        return count

    def _blocked(self, itype: str, zone: str, capacity_type: str) -> bool:
        return any(t == itype and z in ("*", zone) and c in ("*", capacity_type) for t, z, c in self.cloud.unavailable)

    # ----- scale-down ----------------------------------------------------------------------------
    def _scale_down(self, pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> None:
        mine = {r.node_name: r for r in self._members() if r.node_name}
        by_node: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"):
                by_node.setdefault(p["spec"]["nodeName"], []).append(p)
        pdbs = self.store.view("poddisruptionbudgets")
        usable = [n for n in nodes if _is_ready(n) and not (n.get("spec") or {}).get("unschedulable")]
        for node in usable:
            name = node["metadata"]["name"]
            if name not in mine or name in self.draining:
                continue
            here = by_node.get(name, [])
            movable = [p for p in here if not _daemon(p)]
            if self._utilization(node, here) < self.settings.utilization and \
                    not any(blocker(p, pdbs, self.settings) for p in movable) and \
                    self._fits_elsewhere(movable, [n for n in usable if n["metadata"]["name"] != name], pods):
                self.unneeded_since.setdefault(name, self.loop.now)
            else:
                self.unneeded_since.pop(name, None)
        if self.loop.now - self.last_scale_up < self.settings.delay_after_add_seconds:
            return
        due = sorted(n for n, t in self.unneeded_since.items()
                     if self.loop.now - t >= self.settings.unneeded_seconds and n in mine)
        empty = [n for n in due if not [p for p in by_node.get(n, []) if not _daemon(p)]]
        chosen = empty or due[:1]
        for name in chosen:
            self.unneeded_since.pop(name, None)
            self.draining.add(name)
            if self.log is not None:
                self.log("cluster-autoscaler", f"scale-down: node {name} unneeded for "
                                               f"{self.settings.unneeded_seconds:.0f} s")
            self.drainer.drain_and_terminate(mine[name])

    @staticmethod
    def _utilization(node: dict[str, Any], pods: list[dict[str, Any]]) -> float:
        snapshot = Snapshot([node], pods)
        info = snapshot.nodes[node["metadata"]["name"]]
        shares = [float(info.requested.get(r, Decimal(0)) / info.allocatable[r])
                  for r in ("cpu", "memory") if info.allocatable.get(r)]
        return max(shares, default=0.0)

    @staticmethod
    def _fits_elsewhere(movable: list[dict[str, Any]], others: list[dict[str, Any]],
                        pods: list[dict[str, Any]]) -> bool:
        if not movable:
            return True
        unbound = [{**p, "spec": {k: v for k, v in p["spec"].items() if k != "nodeName"},
                    "status": {"phase": "Pending"}} for p in movable]
        decisions = schedule(unbound, Snapshot(others, pods))
        return all(d.node is not None for d in decisions)


Option = tuple[Group, int, int, tuple[float, float]]  # group, nodes, pods placed, idle (cpu, memory) share


def expand(options: Sequence[Option], expander: str) -> Option:
    """CA's expander: ``priority`` then ``least-waste`` among the highest priority, or ``least-waste``
    alone (least idle CPU, then memory); then the group placing more pods, then the name (CA: random)."""
    if expander == "priority":
        top = max(o[0].priority for o in options)
        options = [o for o in options if o[0].priority == top]
    return min(options, key=lambda o: (o[3], -o[2], o[0].name))


def backoff_seconds(failures: int, settings: BaselineSettings) -> float:
    """A node group's backoff after its ``failures``-th consecutive failed scale-up."""
    return min(settings.initial_backoff_seconds * 2 ** (failures - 1), settings.max_backoff_seconds)


def blocker(pod: dict[str, Any], pdbs: Sequence[dict[str, Any]], settings: BaselineSettings) -> str:
    """Why CA would not remove this pod's node ("" when nothing blocks), as its drain simulation says."""
    meta = pod["metadata"]
    safe = (meta.get("annotations") or {}).get(SAFE_TO_EVICT)
    if safe == "true":
        return ""
    if safe == "false":
        return "safe-to-evict: false"
    if not any(o.get("controller") for o in meta.get("ownerReferences") or ()):
        return "not backed by a controller"
    if settings.skip_nodes_with_system_pods and meta.get("namespace", "default") == "kube-system" \
            and not _covered(pod, pdbs):
        return "kube-system pod without a PodDisruptionBudget"
    if settings.skip_nodes_with_local_storage and any(
            "emptyDir" in v or "hostPath" in v for v in pod["spec"].get("volumes") or ()):
        return "local storage"
    return ""


def _covered(pod: dict[str, Any], pdbs: Sequence[dict[str, Any]]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    ns = pod["metadata"].get("namespace", "default")
    for pdb in pdbs:
        if pdb["metadata"].get("namespace", "default") != ns:
            continue
        sel = (pdb.get("spec") or {}).get("selector") or {}
        if sel and all(labels.get(k) == v for k, v in (sel.get("matchLabels") or {}).items()):
            return True
    return False


def _key(pod: dict[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"


def _marked_unschedulable(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or ())


def _is_ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or ())


def _daemon(pod: dict[str, Any]) -> bool:
    return any(o.get("kind") == "DaemonSet" for o in pod["metadata"].get("ownerReferences") or ())
