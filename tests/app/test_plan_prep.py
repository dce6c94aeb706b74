"""A warm provisioner plans exactly what a cold one plans: ``app/plan_prep.PlanPrep`` keeps the NodePool
table between passes; across sequences of passes in which pods are added, removed, rebound and finish,
nodes are deleted, DaemonSets appear and offerings become unavailable, every warm plan equals the plan made
from scratch on the same input. The provisioner's quicker reads of the same facts agree with the slow
ones."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from autoscaler.app.plan_prep import PlanPrep
from autoscaler.domain.allocatable import allocatable, capacity
from autoscaler.domain.keys import (
    HOSTNAME_LABEL,
    OWNER_ANNOTATION,
    REPLACEMENT_PROVISIONED_ANNOTATION,
    REPLACEMENT_REQUESTED_ANNOTATION,
)
from autoscaler.domain.labels import node_labels
from autoscaler.domain.models import (
    DaemonSet,
    HostPort,
    LabelSelector,
    Node,
    OwnerRef,
    Pod,
    PodAffinityTerm,
    TopologySpreadConstraint,
)
from autoscaler.domain.node_state import awaits_replacement, read_state
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling import plan_reserved_first
from tests.domain.scheduling_world import GI, TYPES, ZONES, pod, pool, world

NODE_TYPES = [t for t in TYPES if t.name in ("m5.large", "m5.xlarge", "c5.xlarge", "r5.large")]


def _node(i: int, rng: random.Random) -> Node:
    it = rng.choice(NODE_TYPES)
    zone = ZONES[i % len(ZONES)]
    name = f"ip-{i:04d}"
    labels = {**node_labels(it, zone=zone, capacity_type="on-demand", node_pool="default"), HOSTNAME_LABEL: name}
    return Node(name, labels=labels, allocatable=allocatable(it), capacity=capacity(it),
                provider_id=f"aws:///{zone}/i-{i:017x}", ready=True)


def _anti(app: str) -> tuple[PodAffinityTerm, ...]:
    return (PodAffinityTerm(LabelSelector(match_labels=(("app", app),)), HOSTNAME_LABEL),)


def _spread(app: str, key: str) -> tuple[TopologySpreadConstraint, ...]:
    return (TopologySpreadConstraint(1, key, "DoNotSchedule", LabelSelector(match_labels=(("app", app),))),)


# shape -> how a pod of app ``app`` is made (bound pods and pending pods alike, so bound pods matter)
SHAPES = {
    "plain": lambda name, app: pod(name, 500, GI // 2, app=app),
    "hostname anti-affinity": lambda name, app: pod(name, 250, GI // 4, app=app, pod_anti_affinity=_anti(app)),
    "zone spread": lambda name, app: pod(name, 300, GI // 2, app=app,
                                         topology_spread=_spread(app, "topology.kubernetes.io/zone")),
    "hostname spread": lambda name, app: pod(name, 300, GI // 2, app=app,
                                             topology_spread=_spread(app, HOSTNAME_LABEL)),
    "host ports": lambda name, app: pod(name, 200, GI // 4, app=app, host_ports=(HostPort(8080, "TCP"),)),
}


class _Cluster:
    """A cluster whose pods and nodes change between passes; each pass reads them as new lists of the same
    objects (as the warm cache serves them)."""

    def __init__(self, shape: str, seed: int, *, limits: bool) -> None:
        self.rng = random.Random(seed)
        self.make = SHAPES[shape]
        self.nodes = [_node(i, self.rng) for i in range(12)]
        self.pods: list[Pod] = []
        self.count = 0
        self.daemonsets: list[DaemonSet] = []
        self.unavailable: set[tuple[str, str, str]] = set()
        self.pools = [pool(limits={"cpu": "64"} if limits else None, requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}])]
        for _ in range(30):
            self.add(bound=True)
        for _ in range(6):
            self.add(bound=False)

    def add(self, *, bound: bool) -> None:
        self.count += 1
        app = self.rng.choice(["web", "api"])
        p = self.make(f"{app}-{self.count}", app)
        if bound and self.nodes:
            p = replace(p, node_name=self.rng.choice(self.nodes).name, phase="Running")
        self.pods.append(p)

    def step(self) -> str:
        """One random change; its name."""
        change = self.rng.choice(["add bound", "add pending", "remove", "rebind", "finish", "delete node",
                                  "daemonset", "unavailable", "nothing"])
        bound = [i for i, p in enumerate(self.pods) if p.node_name]
        if change == "add bound":
            self.add(bound=True)
        elif change == "add pending":
            self.add(bound=False)
        elif change == "remove" and self.pods:
            self.pods.pop(self.rng.randrange(len(self.pods)))
        elif change == "rebind" and bound:
            i = self.rng.choice(bound)
            self.pods[i] = replace(self.pods[i], node_name=self.rng.choice(self.nodes).name)
        elif change == "finish" and bound:
            i = self.rng.choice(bound)
            self.pods[i] = replace(self.pods[i], phase=self.rng.choice(["Succeeded", "Failed"]))
        elif change == "delete node" and len(self.nodes) > 1:
            self.nodes.pop(self.rng.randrange(len(self.nodes)))  # its pods stay bound until they are deleted
        elif change == "daemonset":
            # large enough to change which types hold the pending pods
            template = Pod("kube-system", f"ds-{self.count}", requests={"cpu": 1500, "memory": GI},
                           owner=OwnerRef("DaemonSet", f"ds-{self.count}", controller=True))
            self.daemonsets = [*self.daemonsets, DaemonSet("kube-system", f"ds-{self.count}", template)]
        elif change == "unavailable":
            # the cheapest spot offerings (the ones plans pick) come and go
            cheap = self.rng.choice(["m6g.large", "c5.large", "m5.large"])
            self.unavailable ^= {(cheap, zone, "spot") for zone in ZONES}
        return change

    def snapshot(self) -> PlanInput:
        return world(list(self.pods), pools=self.pools, nodes=list(self.nodes), daemonsets=list(self.daemonsets))


@pytest.mark.parametrize("limits", [False, True], ids=["no limits", "limits"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_warm_pass_plans_what_a_cold_pass_plans(shape: str, limits: bool) -> None:
    placed = 0
    for seed in range(3):
        # Given a cluster and one warm container's planning inputs
        cluster, prep = _Cluster(shape, seed, limits=limits), PlanPrep()
        for number in range(25):
            change = cluster.step() if number else "first pass"
            snap = cluster.snapshot()
            # When the warm container plans, and a cold one plans the same input
            warm = plan_reserved_first(snap, unavailable=cluster.unavailable,
                                       prepared=prep.prepare(snap, cluster.unavailable))
            cold = plan_reserved_first(snap, unavailable=cluster.unavailable)
            # Then the plans are the same
            assert warm == cold, (shape, seed, number, change)
            placed += len(warm.existing)
        # And the warm container built its NodePool table again only for some passes (a DaemonSet or an
        # unavailable offering changed it), not for each
        assert 1 <= prep.rebuilt < 25
    assert placed  # the plans put pods on existing nodes: the bound pods mattered


@pytest.mark.parametrize("annotations", [
    {},
    {"other": "x"},
    {REPLACEMENT_REQUESTED_ANNOTATION: "100"},
    {REPLACEMENT_REQUESTED_ANNOTATION: ""},
    {REPLACEMENT_REQUESTED_ANNOTATION: "soon"},
    {REPLACEMENT_REQUESTED_ANNOTATION: "100", REPLACEMENT_PROVISIONED_ANNOTATION: "99"},
    {REPLACEMENT_REQUESTED_ANNOTATION: "100", REPLACEMENT_PROVISIONED_ANNOTATION: "100"},
    {REPLACEMENT_REQUESTED_ANNOTATION: "100", REPLACEMENT_PROVISIONED_ANNOTATION: "oops"},
    {REPLACEMENT_PROVISIONED_ANNOTATION: "100"},
    {OWNER_ANNOTATION: "interruption", REPLACEMENT_REQUESTED_ANNOTATION: "100"},
])
def test_the_quick_awaiting_replacement_check_agrees_with_the_record(annotations: dict[str, str]) -> None:
    # Given a node's annotations, When the provisioner asks whether it awaits replacement without reading
    # the whole record, Then the answer is the record's
    assert awaits_replacement(annotations) == read_state(annotations).awaiting_replacement
