"""A Cluster-Autoscaler-like baseline, run on the same scenario instead of the autoscaler's functions so
the two can be compared (dollars, pending time).

The policy is the Cluster Autoscaler's defaults on one node group of a single instance type
(https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md): every ``scan_seconds``
(10 s) it looks at pods kube-scheduler marked unschedulable, counts the group's upcoming nodes as
capacity for them first, and adds the fewest nodes of the group's type that kube-scheduler (the
simulation's oracle) would place them on, once the pods that fit on the current nodes are filtered
out (CA's FilterOutSchedulable). A node whose pods' requests are under ``utilization`` (50 %)
of its allocatable cpu and memory, and whose pods would all fit elsewhere, is unneeded; after
``unneeded_seconds`` (10 min) it is drained through the Eviction API and terminated, one non-empty node
at a time, never within ``delay_after_add_seconds`` (10 min) of a scale-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from simulator.kube_store import Store
from simulator.local import node_manifest
from simulator.sim.cloud import CloudWorld, InstanceRecord, ec2_instance
from simulator.sim.engine import EventLoop
from simulator.sim.kubelet import BASELINE_GROUP_TAG
from simulator.sim.nodegroups import ManagedNodeGroups
from simulator.sim.scheduler import Snapshot, schedule, wants_scheduling

GROUP = "ca-baseline"


@dataclass
class BaselineSettings:
    instance_type: str = "m5.xlarge"
    capacity_type: str = "on-demand"
    max_size: int = 100
    scan_seconds: float = 10.0
    utilization: float = 0.5
    unneeded_seconds: float = 600.0
    delay_after_add_seconds: float = 600.0


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
    unneeded_since: dict[str, float] = field(default_factory=dict)
    draining: set[str] = field(default_factory=set)
    last_scale_up: float = float("-inf")
    _launched: int = 0

    def start(self) -> None:
        self.loop.every(self.settings.scan_seconds, "cluster-autoscaler", self.scan)

    def _members(self) -> list[InstanceRecord]:
        return [r for r in self.cloud.live()
                if r.instance is not None and r.instance.tags.get(BASELINE_GROUP_TAG) == GROUP]

    def _template(self, index: int) -> dict[str, Any]:
        zone = sorted(self.subnets)[index % len(self.subnets)]
        inst = ec2_instance({"InstanceId": f"template-{index}", "InstanceType": self.settings.instance_type,
                                  "Placement": {"AvailabilityZone": zone},
                                  "PrivateDnsName": f"template-{index}.internal"})
        node = node_manifest(inst, self.instance_types()[self.settings.instance_type], pool=None, region=self.region)
        node["spec"]["taints"] = []
        node["metadata"]["labels"].pop("karpenter.sh/nodepool", None)
        node["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] = GROUP
        return node

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
        # FilterOutSchedulable: pods that fit on the nodes as they are now (one just became Ready) wait
        # for kube-scheduler instead of new nodes.
        fits = {d.pod for d in schedule(pending, Snapshot(nodes, pods)) if d.node is not None}
        pending = [p for p in pending if f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}"
                   not in fits]
        if not pending:
            return
        ready = {n["metadata"]["name"] for n in nodes if _is_ready(n)}
        upcoming = sum(1 for r in self._members() if r.node_name is None or r.node_name not in ready)
        room = self.settings.max_size - len(self._members())
        placed_before, needed = self._placed(pending, upcoming), 0
        for extra in range(1, room + 1):
            placed = self._placed(pending, upcoming + extra)
            if placed == placed_before:
                break
            needed, placed_before = extra, placed
            if placed == len(pending):
                break
        if needed:
            self._launch(needed)
            if self.log is not None:
                self.log("cluster-autoscaler", f"scale-up: {needed} x {self.settings.instance_type} for "
                                               f"{len(pending)} unschedulable pod(s) ({upcoming} upcoming)")

    def _placed(self, pending: list[dict[str, Any]], count: int) -> int:
        if count == 0:
            return 0
        snapshot = Snapshot([self._template(i) for i in range(count)], [])
        return sum(1 for d in schedule(pending, snapshot) if d.node is not None)

    def _launch(self, count: int) -> None:
        zones = sorted(self.subnets)
        for _ in range(count):
            zone = zones[self._launched % len(zones)]
            self._launched += 1
            spot = {"InstanceMarketOptions": {"MarketType": "spot"}} if self.settings.capacity_type == "spot" else {}
            self.cloud.ec2.run_instances(
                ImageId=self.image_id, InstanceType=self.settings.instance_type, MinCount=1, MaxCount=1,
                SubnetId=self.subnets[zone], **spot,
                TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": BASELINE_GROUP_TAG, "Value": GROUP}]}])
        self.last_scale_up = self.loop.now

    # ----- scale-down ----------------------------------------------------------------------------
    def _scale_down(self, pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> None:
        mine = {r.node_name: r for r in self._members() if r.node_name}
        by_node: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"):
                by_node.setdefault(p["spec"]["nodeName"], []).append(p)
        usable = [n for n in nodes if _is_ready(n) and not (n.get("spec") or {}).get("unschedulable")]
        for node in usable:
            name = node["metadata"]["name"]
            if name not in mine or name in self.draining:
                continue
            movable = [p for p in by_node.get(name, []) if not _daemon(p)]
            if self._utilization(node, by_node.get(name, [])) < self.settings.utilization and \
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


def _marked_unschedulable(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or ())


def _is_ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or ())


def _daemon(pod: dict[str, Any]) -> bool:
    return any(o.get("kind") == "DaemonSet" for o in pod["metadata"].get("ownerReferences") or ())
