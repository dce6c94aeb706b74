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
from tests.domain.karpenter_port import (
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
from tests.domain.scheduling_world import GI

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


def test_issue33_item_3_host_ports_held_on_a_node_not_ready_yet_and_by_any_namespace() -> None:
    # Given a registered node that is not Ready yet whose kube-system pod (bound, not started) holds port 80
    c = Cluster()
    c.nodes.append(replace(node("booting", {ZONE: Z1, CT: "on-demand", ARCH: "amd64"}), ready=False))
    c.pods.append(kpod("proxy", ns="kube-system", ports=[80], node_name="booting", phase="Pending"))
    # When a pending pod asks for host port 80 (and another for 8080)
    result = c.provision([nodepool()], [kpod("web-new", ports=[80], labels={"app": "new"}),
                                        kpod("web-other", ports=[8080], labels={"app": "other"})])
    # Then the port is taken there all the same: kube-scheduler counts every pod bound to the node
    assert "default/web-new" not in result.existing
    assert result.existing.get("default/web-other") == "booting"
    assert c.scheduled("web-new")


def _raw_pod(name: str, namespace: str, *, app: str, node_name: str | None = None,
             anti_namespaces: dict[str, str] | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if anti_namespaces is not None:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}},
            "namespaceSelector": {"matchLabels": anti_namespaces}}]}}
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"app": app}}, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


def test_issue33_item_7_namespace_selector_on_anti_affinity() -> None:
    from autoscaler.domain.objects import pod_from_dict
    from autoscaler.domain.snapshot import parse_snapshot

    # Given a node running an app=db pod in namespace team-a (labelled tier=data) and another node running
    # an app=db pod in namespace team-b (no label)
    nodes = [node(name, {ZONE: Z1, CT: "on-demand", ARCH: "amd64"}) for name in ("node-a", "node-b")]
    bound = [pod_from_dict(_raw_pod("db-a", "team-a", app="db", node_name="node-a")),
             pod_from_dict(_raw_pod("db-b", "team-b", app="db", node_name="node-b"))]
    # When a pending pod in namespace web avoids app=db pods of namespaces labelled tier=data
    pending = pod_from_dict(_raw_pod("cache", "web", app="cache", anti_namespaces={"tier": "data"}))
    snap = PlanInput(node_pools=[nodepool()], node_classes={"default": NODE_CLASS}, pods=[*bound, pending],
                     nodes=nodes, instance_types=[C5_2XLARGE],
                     offerings=[Offering("c5.2xlarge", Z1, "on-demand", 0.34)],
                     namespaces={"team-a": {"tier": "data"}, "team-b": {}, "web": {}})
    # Then it goes on node-b (team-b is not selected), never next to team-a's db pod
    assert plan(snap).existing == {"web/cache": "node-b"}
    # And with team-b labelled tier=data too, neither node may take it: a new node is launched
    both = replace(snap, namespaces={"team-a": {"tier": "data"}, "team-b": {"tier": "data"}, "web": {}})
    result = plan(both)
    assert result.existing == {} and [launch.pods for launch in result.launches] == [("web/cache",)]
    # And a snapshot carries the namespaces (key ``namespaces``, v1 Namespace objects)
    parsed = parse_snapshot({"namespaces": [{"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": "team-a", "labels": {"tier": "data"}}}]})
    assert parsed.namespaces == {"team-a": {"tier": "data"}}


def test_issue33_item_1_daemonset_overhead_is_exact_once_the_zone_is_decided() -> None:
    from tests.domain.scheduling_world import TYPES

    # Given a DaemonSet on us-east-1a nodes only, too large to leave an m5.large room for the pod
    daemon = DaemonSet("kube-system", "zonal-agent", kpod("agent", cpu=1500, memory=64 * 2**20,
                                                          node_selector={ZONE: Z1}))
    offers = [Offering(name, zone, "on-demand", price) for name, price in (("m5.large", 0.096), ("m5.xlarge", 0.192))
              for zone in (Z1, Z2)]
    pending = kpod("app", cpu=1000, memory=GI, node_selector={ZONE: Z2})
    snap = PlanInput(node_pools=[nodepool()], node_classes={"default": NODE_CLASS}, pods=[pending],
                     instance_types=[t for t in TYPES if t.name in ("m5.large", "m5.xlarge")], offerings=offers,
                     daemonsets=[daemon])
    # When the pod must go to us-east-1b, where the DaemonSet never lands
    (launch,) = plan(snap).launches
    # Then its node may be an m5.large: the overhead is counted exactly once the zone is decided
    assert launch.zones == (Z2,) and launch.instance_types[0] == "m5.large"


def _ports_pod(ports: list[dict[str, object]], *, where: str = "containers") -> dict[str, object]:
    container: dict[str, object] = {"name": "c", "ports": ports}
    spec: dict[str, object] = {"containers": [{"name": "app"}]}
    if where == "containers":
        spec["containers"] = [container]
    else:
        spec["initContainers"] = [{**container, **({"restartPolicy": "Always"} if where == "sidecar" else {})}]
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def test_issue33_item_3_host_ports_parsed_as_node_ports_counts_them() -> None:
    import pytest

    from autoscaler.domain.models import HostPort
    from autoscaler.domain.objects import ObjectError, pod_from_dict

    # An app container's host port, TCP by default, with its hostIP; a containerPort alone holds nothing
    assert pod_from_dict(_ports_pod([{"containerPort": 8080}, {"containerPort": 80, "hostPort": 80},
                                     {"containerPort": 53, "hostPort": 53, "protocol": "UDP",
                                      "hostIP": "10.0.0.1"}])).host_ports == (
        HostPort(80, "TCP", ""), HostPort(53, "UDP", "10.0.0.1"))
    # A sidecar (restartable init container) holds its port for the pod's life; an init container does not
    port = [{"containerPort": 9901, "hostPort": 9901}]
    assert pod_from_dict(_ports_pod(port, where="sidecar")).host_ports == (HostPort(9901),)
    assert pod_from_dict(_ports_pod(port, where="init")).host_ports == ()
    # A hostPort that is not a number is named
    with pytest.raises(ObjectError, match=r"containers\[0\]\.ports\[0\]\.hostPort: must be an integer"):
        pod_from_dict(_ports_pod([{"containerPort": 80, "hostPort": "http"}]))


def test_issue33_item_3_host_ports_overlap_as_node_ports_decides() -> None:
    from autoscaler.domain.models import HostPort

    tcp80 = HostPort(80)
    assert tcp80.overlaps(HostPort(80, "TCP", "10.0.0.1")) and HostPort(80, "TCP", "10.0.0.1").overlaps(tcp80)
    assert HostPort(80, "TCP", "0.0.0.0").overlaps(HostPort(80, "TCP", "10.0.0.1"))
    assert HostPort(80, "TCP", "10.0.0.1").overlaps(HostPort(80, "TCP", "10.0.0.1"))
    assert not HostPort(80, "TCP", "10.0.0.1").overlaps(HostPort(80, "TCP", "10.0.0.2"))
    assert not tcp80.overlaps(HostPort(80, "UDP")) and not tcp80.overlaps(HostPort(81))


def test_issue33_item_3_daemonset_host_port_on_another_address_does_not_block_a_pool() -> None:
    from autoscaler.domain.models import HostPort

    # Given a DaemonSet on every node of the pool holding 80/TCP on 127.0.0.1 only
    held = (HostPort(80, "TCP", "127.0.0.1"),)
    daemon = DaemonSet("kube-system", "local-proxy", replace(kpod("proxy"), host_ports=held))
    offers = [Offering("c5.2xlarge", Z1, "on-demand", 0.34)]

    def planned(port: HostPort) -> list[str]:
        pod = replace(kpod("web"), host_ports=(port,))
        snap = PlanInput(node_pools=[nodepool()], node_classes={"default": NODE_CLASS}, pods=[pod],
                         instance_types=[C5_2XLARGE], offerings=offers, daemonsets=[daemon])
        return [key for launch in plan(snap).launches for key in launch.pods]

    # Then a pod asking for 80 on another address launches there; one asking for 80 on every address cannot
    assert planned(HostPort(80, "TCP", "10.0.0.1")) == ["default/web"]
    assert planned(HostPort(80)) == []
