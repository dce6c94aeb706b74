"""Issue 35: with kubelet maxPods below the ENI limit, the EKS AMI (bootstrap.sh on AL2, nodeadm on AL2023)
reserves kube-reserved memory from the ENI max pods, not from maxPods; Bottlerocket from its max-pods
setting. The planner's allocatable must be the one the node gets: here it is compared with what the
independent kubelet stand-in (simulator/eks_node.py, which imports nothing from the product) derives from
the user data the launch path generates, for every AMI family and a spread of instance types."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.adapters.aws.userdata import NodeJoin, render_user_data
from autoscaler.domain.allocatable import allocatable, eni_max_pods
from autoscaler.domain.instance_types import instance_type_from_ec2
from autoscaler.domain.models import InstanceType, Taint
from autoscaler.domain.nodeclass import KubeletConfiguration
from simulator import eks_node
from simulator.local import moto_catalog
from tests.adapters.aws.helpers import CLUSTER

FAMILIES = ("AL2023", "AL2", "Bottlerocket")
TYPES = ("m5.large", "m5.xlarge", "c5.4xlarge", "r6g.2xlarge", "t3.medium", "m5.24xlarge")
KUBELETS: dict[str, dict[str, Any]] = {
    "maxPods below the ENI limit": {"maxPods": 20},
    "maxPods and podsPerCore": {"maxPods": 30, "podsPerCore": 4},
    "maxPods with reservations and eviction": {
        "maxPods": 25, "systemReserved": {"cpu": "100m", "memory": "200Mi"},
        "kubeReserved": {"memory": "600Mi"}, "evictionHard": {"memory.available": "300Mi"}},
    "defaults": {},
}


def _types() -> dict[str, InstanceType]:
    infos, _ = moto_catalog()
    out = {}
    for info in infos:
        if info["InstanceType"] in TYPES:
            it = instance_type_from_ec2(dict(info))
            assert it is not None
            out[it.name] = it
    assert sorted(out) == sorted(TYPES)
    return out


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", sorted(KUBELETS))
def test_issue35_the_planned_allocatable_is_what_the_kubelet_gets_from_the_user_data(family: str, case: str) -> None:
    kubelet = KubeletConfiguration.model_validate(KUBELETS[case])
    join = NodeJoin(labels={"karpenter.sh/nodepool": "general"},
                    taints=(Taint(key="karpenter.sh/unregistered", value="", effect="NoExecute"),), kubelet=kubelet)
    user_data = render_user_data(family=family, cluster=CLUSTER, join=join, user_data=None)
    for name, it in _types().items():
        node = eks_node.node_from_user_data(user_data, eks_node.instance_info(name), name="n", zone="us-east-1a",
                                            region="us-east-1", capacity_type="on-demand")
        planned = allocatable(it, kubelet=kubelet, ami_family=family)
        assert node.family == family
        assert {k: planned[k] for k in node.allocatable} == dict(node.allocatable), (family, case, name)


def test_issue35_max_pods_below_the_eni_limit_keeps_the_eni_reservation_on_al2023() -> None:
    # m5.xlarge: 58 pods by its ENIs. With maxPods 20 nodeadm still reserves 255Mi + 11Mi x 58 = 893Mi.
    it = _types()["m5.xlarge"]
    assert eni_max_pods(it) == 58
    kubelet = KubeletConfiguration.model_validate({"maxPods": 20})
    al2023 = allocatable(it, kubelet=kubelet, ami_family="AL2023")
    bottlerocket = allocatable(it, kubelet=kubelet, ami_family="Bottlerocket")
    assert bottlerocket["memory"] - al2023["memory"] == 11 * (58 - 20) * 2**20  # 418Mi more on Bottlerocket
    assert al2023["pods"] == bottlerocket["pods"] == 20
