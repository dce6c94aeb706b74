"""The EKS AMI allocatable formula, with and without kubelet overrides."""

from __future__ import annotations

import pytest

from autoscaler.domain.allocatable import MI, allocatable, eni_max_pods, kube_reserved_cpu_millis, max_pods
from autoscaler.domain.labels import node_labels
from autoscaler.domain.models import InstanceType
from autoscaler.domain.nodeclass import KubeletConfiguration

M5_LARGE = InstanceType("m5.large", "amd64", vcpus=2, memory_mib=8192, max_enis=3, ipv4_per_eni=10,
                        hypervisor="nitro")
M5_24XL = InstanceType("m5.24xlarge", "amd64", vcpus=96, memory_mib=393216, max_enis=15, ipv4_per_eni=50)


@pytest.mark.parametrize(("vcpus", "millis"), [(1, 60), (2, 70), (4, 80), (8, 90), (96, 310)])
def test_cpu_reservation_scale(vcpus: int, millis: int) -> None:
    assert kube_reserved_cpu_millis(vcpus) == millis


def test_m5_large_defaults() -> None:
    assert eni_max_pods(M5_LARGE) == 29
    alloc = allocatable(M5_LARGE)
    assert alloc["cpu"] == 1930
    assert alloc["pods"] == 29
    # 8192Mi - 7.5% VM overhead (615Mi) - (255Mi + 11Mi*29) - 100Mi eviction
    assert alloc["memory"] == (8192 - 615 - 574 - 100) * MI
    assert alloc["ephemeral-storage"] == 20 * 2**30 - 2**30 - 2 * 2**30  # 1Gi reserved, 10% eviction


@pytest.mark.parametrize(
    ("kubelet", "pods", "memory_mib"),
    [
        # AL2023 (the default) reserves memory from the ENI max pods (29) whatever maxPods or podsPerCore say
        (KubeletConfiguration(max_pods=110), 110, 8192 - 615 - 574 - 100),
        (KubeletConfiguration(pods_per_core=4), 8, 8192 - 615 - 574 - 100),
        (KubeletConfiguration(kube_reserved={"memory": "1Gi"}), 29, 8192 - 615 - 1024 - 100),
        (KubeletConfiguration(system_reserved={"memory": "100Mi"}), 29, 8192 - 615 - 574 - 100 - 100),
        (KubeletConfiguration(eviction_hard={"memory.available": "500Mi"}), 29, 8192 - 615 - 574 - 500),
    ],
)
def test_kubelet_overrides(kubelet: KubeletConfiguration, pods: int, memory_mib: int) -> None:
    alloc = allocatable(M5_LARGE, kubelet=kubelet)
    assert max_pods(M5_LARGE, kubelet) == pods
    assert alloc["pods"] == pods
    assert alloc["memory"] == memory_mib * MI


@pytest.mark.parametrize(
    ("family", "kubelet", "pods", "memory_mib"),
    [
        ("AL2", KubeletConfiguration(max_pods=20), 20, 8192 - 615 - 574 - 100),
        ("Bottlerocket", KubeletConfiguration(max_pods=20), 20, 8192 - 615 - (255 + 220) - 100),
        ("Bottlerocket", KubeletConfiguration(max_pods=110), 110, 8192 - 615 - (255 + 1210) - 100),
        # Bottlerocket has no pods-per-core setting: the node keeps its ENI max pods
        ("Bottlerocket", KubeletConfiguration(pods_per_core=4), 29, 8192 - 615 - 574 - 100),
    ],
)
def test_kube_reserved_memory_follows_the_ami_family(family: str, kubelet: KubeletConfiguration, pods: int,
                                                     memory_mib: int) -> None:
    alloc = allocatable(M5_LARGE, kubelet=kubelet, ami_family=family)
    assert alloc["pods"] == pods
    assert alloc["memory"] == memory_mib * MI


def test_well_known_labels() -> None:
    labels = node_labels(M5_24XL, zone="us-east-1a", capacity_type="spot", node_pool="default")
    assert labels["karpenter.k8s.aws/instance-category"] == "m"
    assert labels["karpenter.k8s.aws/instance-family"] == "m5"
    assert labels["karpenter.k8s.aws/instance-generation"] == "5"
    assert labels["karpenter.k8s.aws/instance-size"] == "24xlarge"
    assert labels["karpenter.k8s.aws/instance-cpu"] == "96"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert labels["karpenter.sh/capacity-type"] == "spot"
    assert labels["karpenter.sh/nodepool"] == "default"
    assert labels["kubernetes.io/arch"] == "amd64"
