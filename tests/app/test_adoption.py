"""Nodes Karpenter launched, as the disruption pass sorts them (``app/adoption.KarpenterNodes``), on the cloud
fake: adopted ones count as ours, unadopted ones are left alone with a gauge and one log line per change, and
EC2 is not asked when every NodePool node is ours."""

from __future__ import annotations

import logging

import pytest

from autoscaler.app.adoption import KarpenterNodes
from autoscaler.domain.keys import KARPENTER_TERMINATION_FINALIZER
from autoscaler.domain.models import Node
from autoscaler.domain.objects import node_from_dict
from autoscaler.domain.ownership import launch_tags
from autoscaler.metrics_catalog import KARPENTER_NODES_NOT_ADOPTED, RecordingSink
from tests import kube_objects as ko
from tests.app.fakes_cloud import FakeCloud

KARPENTER_TAGS = {"karpenter.sh/nodepool": "default", "kubernetes.io/cluster/prod": "owned"}


def _node(name: str, instance_id: str, *, pool_label: str = "karpenter.sh/nodepool") -> Node:
    raw = ko.node(name, labels={pool_label: "default"})
    raw["spec"]["providerID"] = f"aws:///us-east-1a/{instance_id}"
    return node_from_dict(raw)


@pytest.fixture
def cloud() -> FakeCloud:
    return FakeCloud(cluster_name="prod")


def test_adopted_karpenter_nodes_count_as_ours_and_release_karpenters_finalizer(cloud: FakeCloud) -> None:
    karpenter = cloud.run_instance(tags=KARPENTER_TAGS).instance_id
    sorter = KarpenterNodes(cloud=cloud, sink=RecordingSink(), adopt=True)
    owned: set[str] = set()
    assert sorter.sort([_node("k1", karpenter)], owned=owned) == set()
    assert owned == {karpenter}
    assert sorter.release_finalizers == (KARPENTER_TERMINATION_FINALIZER,)


def test_unadopted_karpenter_nodes_are_left_alone_with_a_gauge_and_one_log_line_per_change(
        cloud: FakeCloud, caplog: pytest.LogCaptureFixture) -> None:
    first = cloud.run_instance(tags=KARPENTER_TAGS).instance_id
    v0 = cloud.run_instance(tags={"karpenter.sh/provisioner-name": "default", "eks:eks-cluster-name": "prod"})
    sink = RecordingSink()
    sorter = KarpenterNodes(cloud=cloud, sink=sink, adopt=False)
    nodes = [_node("k1", first), _node("k2", v0.instance_id, pool_label="karpenter.sh/provisioner-name")]
    with caplog.at_level(logging.INFO, logger="autoscaler.disruption"):
        owned: set[str] = set()
        assert sorter.sort(nodes, owned=owned) == {"k1", "k2"} and owned == set()
        assert sorter.sort(nodes, owned=set()) == {"k1", "k2"}
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "2 node(s) launched by Karpenter are left alone (not disrupted or consolidated)"]
    assert sink.total(KARPENTER_NODES_NOT_ADOPTED.name) == 4
    assert sorter.release_finalizers == ()


def test_ec2_is_not_asked_when_every_nodepool_node_is_ours(cloud: FakeCloud) -> None:
    ours = cloud.run_instance(tags=launch_tags(cluster_name="prod", node_pool="default", node_class="default",
                                               claim_id="default-1")).instance_id
    sorter = KarpenterNodes(cloud=cloud, sink=RecordingSink(), adopt=False)
    assert sorter.sort([_node("n1", ours)], owned={ours}) == set()
    assert cloud.calls["karpenter_instances"] == 0
