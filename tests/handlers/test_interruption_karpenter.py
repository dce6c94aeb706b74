"""A spot warning for a node Karpenter launched, through the interruption handler on moto + the Kubernetes API
emulator: adopted (``migration.adoptKarpenterNodes``), its instance is terminated and its Node deleted
despite Karpenter's finalizer; not adopted, it is drained (as NTH would) but never terminated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autoscaler.domain.keys import KARPENTER_TERMINATION_FINALIZER
from autoscaler.handlers.runtime import set_runtime
from simulator.kube_api import KubeApiServer
from tests import kube_objects as ko
from tests.handlers.interruption_world import World, demo_config, event_for


def _world(kube_api: KubeApiServer, *, adopt: bool) -> World:
    config = demo_config()
    config = config.model_copy(update={"migration": config.migration.model_copy(
        update={"adopt_karpenter_nodes": adopt})})
    return World.create(kube_api, config=config)


@pytest.fixture
def adopting(aws: None, kube_api: KubeApiServer) -> Iterator[World]:
    yield _world(kube_api, adopt=True)
    set_runtime(None)


@pytest.fixture
def not_adopting(aws: None, kube_api: KubeApiServer) -> Iterator[World]:
    yield _world(kube_api, adopt=False)
    set_runtime(None)


def _karpenter_node(world: World, name: str, pool_key: str) -> str:
    """An instance and Node as Karpenter launches them (its tag and label, its finalizer, none of ours)."""
    tags = {"kubernetes.io/cluster/demo": "owned", pool_key: "default"}
    iid = str(world.ec2.run_instances(
        ImageId=world.image, InstanceType="m5.large", MinCount=1, MaxCount=1,
        Placement={"AvailabilityZone": "us-west-2a"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )["Instances"][0]["InstanceId"])
    obj = ko.node(name, labels={"node.kubernetes.io/instance-type": "m5.large", pool_key: "default",
                                "topology.kubernetes.io/zone": "us-west-2a", "karpenter.sh/capacity-type": "spot"})
    obj["spec"]["providerID"] = f"aws:///us-west-2a/{iid}"
    obj["metadata"]["finalizers"] = [KARPENTER_TERMINATION_FINALIZER]
    world.kube.store.create("nodes", obj)
    world.add_pod("web-1", name, labels={"app": "web"})
    return iid


@pytest.mark.parametrize("pool_key", ["karpenter.sh/nodepool", "karpenter.sh/provisioner-name"])
def test_an_adopted_karpenter_node_is_terminated_and_its_node_deleted(adopting: World, pool_key: str) -> None:
    # Given adoption on and a Karpenter node (with its finalizer) running a pod
    iid = _karpenter_node(adopting, "k1", pool_key)
    # When its spot interruption warning arrives
    assert adopting.run(event_for("spot-interruption-warning", iid)) == {"batchItemFailures": []}
    # Then it is drained, the instance terminated and the Node really deleted (finalizer released)
    assert adopting.state(iid) in ("shutting-down", "terminated")
    assert adopting.node("k1") is None and adopting.pods_on("k1") == []


def test_without_adoption_a_karpenter_node_is_drained_but_never_terminated(not_adopting: World) -> None:
    iid = _karpenter_node(not_adopting, "k1", "karpenter.sh/nodepool")
    assert not_adopting.run(event_for("spot-interruption-warning", iid)) == {"batchItemFailures": []}
    node = not_adopting.node("k1")
    assert not_adopting.state(iid) == "running"
    assert node is not None and node["spec"].get("unschedulable") and not node["metadata"].get("deletionTimestamp")
    assert node["metadata"]["finalizers"] == [KARPENTER_TERMINATION_FINALIZER]


def test_every_handler_takes_the_adoption_setting(adopting: World, kube_api: KubeApiServer) -> None:
    # The provisioner's lifecycle sweep (deleting Nodes whose instance is gone) and the disruption pass
    # release Karpenter's finalizer too when adoption is on; the defaults release nothing.
    from autoscaler.handlers.disruption import service_for
    from autoscaler.handlers.provisioner import provisioner_for

    assert provisioner_for(adopting.rt, dry_run=False).settings.release_finalizers == (KARPENTER_TERMINATION_FINALIZER,)
    assert service_for(adopting.rt).release_finalizers == (KARPENTER_TERMINATION_FINALIZER,)
    plain = World.create(kube_api)
    assert provisioner_for(plain.rt, dry_run=False).settings.release_finalizers == ()
    assert service_for(plain.rt).release_finalizers == ()
