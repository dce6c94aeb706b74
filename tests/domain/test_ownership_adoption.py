"""Which instances count as this cluster's: ours by the managed-by tag, Karpenter's only when adopted."""

from __future__ import annotations

import pytest

from autoscaler.domain.models import Node
from autoscaler.domain.ownership import (
    karpenter_node_pool,
    launch_tags,
    launched_by_karpenter,
    ownership_problem,
)

CLUSTER_TAG = {"kubernetes.io/cluster/prod": "owned"}
OURS = launch_tags(cluster_name="prod", node_pool="default", node_class="default", claim_id="c1")


@pytest.mark.parametrize(("tags", "karpenter", "owned_without", "owned_with"), [
    # Karpenter v1: NodePool tag + cluster tag (+ eks:eks-cluster-name)
    ({**CLUSTER_TAG, "karpenter.sh/nodepool": "default", "eks:eks-cluster-name": "prod"}, True, False, True),
    # Karpenter v0.2x: Provisioner tag + cluster tag
    ({**CLUSTER_TAG, "karpenter.sh/provisioner-name": "default"}, True, False, True),
    # eks:eks-cluster-name alone names the cluster too
    ({"eks:eks-cluster-name": "prod", "karpenter.sh/nodepool": "default"}, True, False, True),
    # another cluster's Karpenter, a "shared" cluster tag, or no NodePool at all: never
    ({"kubernetes.io/cluster/staging": "owned", "karpenter.sh/nodepool": "default"}, False, False, False),
    ({"kubernetes.io/cluster/prod": "shared", "karpenter.sh/nodepool": "default"}, False, False, False),
    (CLUSTER_TAG, False, False, False),
    # ours stay ours; another autoscaler's (managed-by set) is never Karpenter's
    (OURS, False, True, True),
    ({**OURS, "eks-serverless-autoscaler/managed-by": "staging"}, False, False, False),
])
def test_ownership(tags: dict[str, str], karpenter: bool, owned_without: bool, owned_with: bool) -> None:
    assert launched_by_karpenter(tags, "prod") is karpenter
    assert (ownership_problem(tags, "prod") is None) is owned_without
    assert (ownership_problem(tags, "prod", adopt_karpenter=True) is None) is owned_with


def test_a_refusal_says_how_to_adopt_karpenters_instance() -> None:
    problem = ownership_problem({**CLUSTER_TAG, "karpenter.sh/provisioner-name": "default"}, "prod")
    assert problem is not None and "migration.adoptKarpenterNodes" in problem


def test_provisioner_name_maps_to_the_nodepool_of_the_same_name() -> None:
    assert karpenter_node_pool({"karpenter.sh/provisioner-name": "legacy"}) == "legacy"
    assert Node("n", labels={"karpenter.sh/provisioner-name": "legacy"}).node_pool == "legacy"
    assert Node("n", labels={"karpenter.sh/nodepool": "default"}).node_pool == "default"
    assert Node("n").node_pool == ""
