"""Issue 33, scheduling items: each test is named after its item and asserts what kube-scheduler and
Karpenter do (it failed on the planner before the item was fixed)."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.domain.allocatable import allocatable
from autoscaler.domain.models import (
    DaemonSet,
    InstanceType,
    Offering,
    PersistentVolume,
    PersistentVolumeClaim,
)
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling import plan
from tests.unit.karpenter_port import (
    ARCH,
    CT,
    LABELS,
    NODE_CLASS,
    Z1,
    Z2,
    Z3,
    ZONE,
    Cluster,
    kpod,
    node,
    nodepool,
    req,
    spread,
)
from tests.unit.scheduling_world import GI

C5_2XLARGE = InstanceType("c5.2xlarge", "amd64", vcpus=8, memory_mib=16384, max_enis=4, ipv4_per_eni=15,
                          hypervisor="nitro")


def _daemon_world(pool_capacity_types: tuple[str, ...]) -> tuple[PlanInput, int]:
    """A NodePool of c5.2xlarge only, a DaemonSet on spot nodes only (NTH's usual deployment, 1.5 CPU),
    and six pending pods sized so that five fit beside the daemon and six without it."""
    cpu = allocatable(C5_2XLARGE)["cpu"]
    daemon_cpu = 1500
    pod_cpu = (cpu - daemon_cpu) // 5
    assert 6 * pod_cpu <= cpu and 6 * pod_cpu > cpu - daemon_cpu
    daemon = DaemonSet("kube-system", "aws-node-termination-handler", kpod(
        "nth", cpu=daemon_cpu, memory=64 * 2**20, node_selector={CT: "spot"}))
    offers = [Offering("c5.2xlarge", zone, "on-demand", 0.34) for zone in (Z1, Z2, Z3)]
    offers += [Offering("c5.2xlarge", zone, "spot", 0.12) for zone in (Z1, Z2, Z3)]
    pods = [kpod(f"app-{number}", cpu=pod_cpu, memory=GI, owner="app") for number in range(6)]
    pool = nodepool("default", req(CT, "In", *pool_capacity_types))
    return PlanInput(node_pools=[pool], node_classes={"default": NODE_CLASS}, pods=pods, instance_types=[C5_2XLARGE],
                     offerings=offers, daemonsets=[daemon]), pod_cpu


def test_issue33_item_1_daemonset_selecting_capacity_type_counts_in_overhead() -> None:
    # Given a NodePool that may launch spot, and a DaemonSet that lands on spot nodes
    snap, _ = _daemon_world(("spot", "on-demand"))
    result = plan(snap)
    # Then every spot node holds at most the five pods that fit beside the daemon
    assert not result.unschedulable
    assert all(launch.capacity_type == "spot" for launch in result.launches)
    assert sorted(len(launch.pods) for launch in result.launches) == [1, 5]
    # Given a NodePool that can only launch on-demand, the spot DaemonSet never lands there
    snap, _ = _daemon_world(("on-demand",))
    result = plan(snap)
    assert [len(launch.pods) for launch in result.launches] == [6]


def test_issue33_item_2_volume_zone_with_min_domains() -> None:
    # Given one matching pod in each of three zones (counts 1/1/1) on nodes that are full
    c = Cluster()
    for zone in (Z1, Z2, Z3):
        c.nodes.append(node(f"node-{zone}", {ZONE: zone, CT: "on-demand", ARCH: "amd64"}, cpu=100, memory=128 * 2**20))
        c.pods.append(kpod(labels=LABELS, node_name=f"node-{zone}", phase="Running"))
    # When a pod whose volume is in us-east-1a spreads over zones with maxSkew 1 and minDomains 3
    pod = replace(kpod("db", labels=LABELS, spreads=[spread(ZONE, min_domains=3)]), volume_claims=("data",))
    c.provision([nodepool()], [pod], pvcs=[PersistentVolumeClaim("default", "data", "gp3", "pv-1")],
                pvs=[PersistentVolume("pv-1", (Z1,))])
    # Then it is placed in us-east-1a (2/1/1: skew 1; every zone is eligible, so the minimum is 1)
    assert c.unschedulable == {}
    found = c.node_of("db")
    assert found is not None and found.labels[ZONE] == Z1


def test_issue33_item_3_host_ports_of_bound_pods_are_checked() -> None:
    # Given an existing node with room whose running pod holds host port 80
    c = Cluster()
    c.nodes.append(node("busy", {ZONE: Z1, CT: "on-demand", ARCH: "amd64"}))
    c.pods.append(kpod("web-old", ports=[80], node_name="busy", phase="Running", labels={"app": "old"}))
    # When a pending pod asks for host port 80 (and another for 8080)
    result = c.provision([nodepool()], [kpod("web-new", ports=[80], labels={"app": "new"}),
                                        kpod("web-other", ports=[8080], labels={"app": "other"})])
    # Then it is not planned onto that node (kube-scheduler's NodePorts would refuse it); 8080 is free there
    assert "default/web-new" not in result.existing
    assert result.existing.get("default/web-other") == "busy"
    assert c.scheduled("web-new")
