"""``ClusterRead``: a pass's one read of the cluster and the cloud, as values, and the planner input built
from it (``app/cluster_state.py``). No ports: the read is plain data."""

from __future__ import annotations

from autoscaler.app.cluster_state import ClusterRead
from autoscaler.domain.fleet import CloudInstance
from autoscaler.domain.keys import NODEPOOL_TAG
from autoscaler.domain.objects import node_from_dict, pod_from_dict
from autoscaler.domain.plan import InFlightNode
from tests.kube_objects import node, pod


def _instance(iid: str) -> CloudInstance:
    return CloudInstance(instance_id=iid, instance_type="m5.large", zone="us-east-1a", state="running",
                         capacity_type="spot", launch_time=0.0, tags={NODEPOOL_TAG: "default"})


def _read(*, unregistered: list[CloudInstance]) -> ClusterRead:
    leaving = node_from_dict(node("leaving"))
    daemon = pod("agent", node="leaving", phase="Running", owner_kind="DaemonSet")
    return ClusterRead(
        pods=[pod_from_dict(pod("web", node="leaving", phase="Running", owner_kind="ReplicaSet")),
              pod_from_dict(daemon), pod_from_dict(pod("new"))],
        nodes=[leaving, node_from_dict(node("staying"))], daemonsets=[], pvcs=[], pvs=[], storage_classes=[],
        instance_types=[], offerings=[], node_class_zones={}, reservations={}, unregistered=unregistered)


def test_the_pods_of_leaving_nodes_are_pending_and_the_nodes_are_left_out() -> None:
    read = _read(unregistered=[])
    snap = read.plan_input(node_pools=[], node_classes={}, leaving={"leaving"})
    assert [n.name for n in snap.nodes] == ["staying"]
    # the ReplicaSet's pod moves; the DaemonSet's pod goes with its node
    assert sorted((p.key, p.node_name) for p in snap.pods) == [("default/new", None), ("default/web", None)]
    assert read.pending({"leaving"}) == {"default/new", "default/web"} and read.pending(()) == {"default/new"}
    # the read itself is unchanged: the same read plans without the node leaving
    assert sorted(n.name for n in read.plan_input(node_pools=[], node_classes={}).nodes) == ["leaving", "staying"]


def test_the_launch_record_wins_over_ec2s_view_of_the_same_instance() -> None:
    read = _read(unregistered=[_instance("i-1"), _instance("i-2")])
    claimed = InFlightNode(instance_id="i-1", node_pool="default", instance_type="m5.large", zone="us-east-1a",
                           capacity_type="spot", pod_keys=("default/new",))
    snap = read.plan_input(node_pools=[], node_classes={}, from_claims=[claimed],
                           launched_for={"i-9": ("default/web",)})
    assert sorted(f.instance_id for f in snap.in_flight) == ["i-1", "i-2"]
    assert [f for f in snap.in_flight if f.instance_id == "i-1"] == [claimed]
    assert snap.launched_for == {"i-9": ("default/web",)}
