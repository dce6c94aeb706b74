"""simulator/eks_node.py against the published figures: the EKS AMI's max-pods table and kube-reserved
formula, the kubelet's eviction defaults, Karpenter's instance labels, and user data as the bootstraps
read it. Expected values are written out by hand from those definitions, not computed by the product."""

from __future__ import annotations

import ast
import base64
from pathlib import Path

import pytest

from autoscaler.adapters.aws.userdata import ClusterInfo, NodeJoin, render_user_data
from autoscaler.domain.models import Taint
from autoscaler.domain.nodeclass import KubeletConfiguration
from simulator import eks_node as eks
from simulator.eks_node import CPU, GI, MEMORY, MI, PODS, STORAGE, Kubelet

# The EKS AMI's eni-max-pods.txt rows (ENIs x (IPv4 per ENI - 1) + 2).
MAX_PODS = {"m5.large": 29, "m5.xlarge": 58, "c5.18xlarge": 737, "t3.micro": 4, "m6g.large": 29,
            "c6a.xlarge": 58, "m5.24xlarge": 737}


@pytest.mark.parametrize(("name", "pods"), sorted(MAX_PODS.items()))
def test_max_pods_matches_the_eks_ami_table(name: str, pods: int) -> None:
    assert eks.max_pods(eks.instance_info(name)) == pods


@pytest.mark.parametrize(("vcpus", "millis"), [(1, 60), (2, 70), (4, 80), (8, 90), (5, 82), (48, 190), (96, 310)])
def test_kube_reserved_cpu_follows_the_amis_core_ranges(vcpus: int, millis: int) -> None:
    # 5 cores: 60 + 10 + 10 + 2.5 truncated to 2 (nodeadm truncates each range's millicores).
    assert eks.kube_reserved_cpu_millis(vcpus) == millis


def test_m5_large_capacity_and_allocatable_by_hand() -> None:
    info = eks.instance_info("m5.large")
    cap = eks.capacity(info)
    mem = (8192 - 615) * MI  # 7.5 % of 8,192 MiB is 614.4, rounded up
    assert cap == {CPU: 2000, MEMORY: mem, STORAGE: 20 * GI, PODS: 29}
    alloc = eks.allocatable(info)
    assert alloc == {CPU: 1930, MEMORY: mem - (255 + 11 * 29) * MI - 100 * MI,
                     STORAGE: 20 * GI - GI - (20 * GI) // 10, PODS: 29}
    assert eks.quantities(alloc) == {CPU: "1930m", MEMORY: f"{(mem - 674 * MI) // 1024}Ki",
                                     STORAGE: f"{17 * GI // 1024}Ki", PODS: "29"}


def test_kubelet_max_pods_does_not_change_the_amis_memory_reservation() -> None:
    """nodeadm computes kube-reserved from the ENI max pods before the user's maxPods is merged."""
    info = eks.instance_info("m5.large")
    default, small = eks.allocatable(info), eks.allocatable(info, Kubelet(max_pods=10))
    assert small[PODS] == 10
    assert small[MEMORY] == default[MEMORY]
    bottlerocket = eks.allocatable(info, Kubelet(max_pods=10, memory_reserve_from="max"))
    assert bottlerocket[MEMORY] == default[MEMORY] + 11 * 19 * MI


def test_pods_per_core_caps_max_pods() -> None:
    info = eks.instance_info("m5.xlarge")
    assert eks.max_pods(info, Kubelet(pods_per_core=4)) == 16
    assert eks.max_pods(info, Kubelet(max_pods=10, pods_per_core=4)) == 10
    assert eks.max_pods(info, Kubelet(max_pods=100)) == 100


def test_reserved_and_eviction_overrides_replace_one_resource_each() -> None:
    info = eks.instance_info("m5.large")
    base = eks.allocatable(info)
    kc = Kubelet.from_config({"kubeReserved": {"cpu": "200m"}, "systemReserved": {"memory": "1Gi", "cpu": "100m"},
                              "evictionHard": {"memory.available": "5%"}})
    alloc = eks.allocatable(info, kc)
    assert alloc[CPU] == 2000 - 200 - 100
    cap_mem = eks.capacity(info)[MEMORY]
    assert alloc[MEMORY] == base[MEMORY] + 100 * MI - GI - int(cap_mem * 0.05)
    assert alloc[STORAGE] == base[STORAGE]  # nodefs.available keeps its 10 % default


def test_kubelet_config_rejects_nonsense_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="maxPods"):
        Kubelet.from_config({"maxPods": "lots"})
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        eks.allocatable(eks.instance_info("m5.large"), Kubelet(system_reserved={"memory": "one gig"}))


def test_nvidia_gpus_are_capacity() -> None:
    info = eks.instance_info("g4dn.xlarge")
    assert eks.capacity(info)[eks.NVIDIA_GPU] == 1
    labels = eks.labels_for(info, zone="us-east-1a", region="us-east-1", capacity_type="spot")
    assert labels["karpenter.k8s.aws/instance-gpu-manufacturer"] == "nvidia"
    assert labels["karpenter.k8s.aws/instance-gpu-count"] == "1"


def test_labels_of_an_instance() -> None:
    info = eks.instance_info("c6gn.2xlarge")
    labels = eks.labels_for(info, zone="us-east-1b", region="us-east-1", capacity_type="on-demand", hostname="n1")
    assert labels["kubernetes.io/arch"] == "arm64"
    assert labels["node.kubernetes.io/instance-type"] == "c6gn.2xlarge"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1b"
    assert labels["topology.kubernetes.io/region"] == "us-east-1"
    assert labels["kubernetes.io/hostname"] == "n1"
    assert labels["karpenter.k8s.aws/instance-category"] == "c"
    assert labels["karpenter.k8s.aws/instance-family"] == "c6gn"
    assert labels["karpenter.k8s.aws/instance-generation"] == "6"
    assert labels["karpenter.k8s.aws/instance-size"] == "2xlarge"
    assert labels["karpenter.k8s.aws/instance-cpu"] == "8"
    assert labels["karpenter.k8s.aws/instance-memory"] == "16384"
    assert labels["karpenter.k8s.aws/instance-hypervisor"] == "nitro"
    assert labels["karpenter.k8s.aws/instance-cpu-manufacturer"] == "aws"
    assert "karpenter.k8s.aws/instance-gpu-count" not in labels  # Karpenter sets it only with GPUs


def test_capacity_type_from_describe_instances() -> None:
    assert eks.capacity_type_of({"InstanceLifecycle": "spot"}) == "spot"
    assert eks.capacity_type_of({"CapacityReservationId": "cr-1"}) == "reserved"
    assert eks.capacity_type_of({}) == "on-demand"


AL2023 = '''MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="BOUNDARY"

--BOUNDARY
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  kubelet:
    config:
      maxPods: 50
      kubeReserved: {memory: 1Gi}

--BOUNDARY
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash
echo hello

--BOUNDARY
Content-Type: application/node.eks.aws

---
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster: {name: demo, apiServerEndpoint: https://example, certificateAuthority: Q0E=, cidr: 10.100.0.0/16}
  kubelet:
    config:
      maxPods: 20
      evictionHard: {memory.available: 200Mi}
    flags:
      - --node-labels=karpenter.sh/nodepool=default,team=a
      - --register-with-taints=karpenter.sh/unregistered:NoExecute,dedicated=gpu:NoSchedule

--BOUNDARY--
'''


def test_al2023_nodeconfigs_merge_in_order() -> None:
    join = eks.parse_user_data(AL2023)
    assert join.family == "AL2023"
    assert join.labels == {"karpenter.sh/nodepool": "default", "team": "a"}
    assert join.taints == ({"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                           {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})
    assert join.kubelet.max_pods == 20
    assert dict(join.kubelet.kube_reserved) == {"memory": "1Gi"}
    assert dict(join.kubelet.eviction_hard) == {"memory.available": "200Mi"}
    # base64, as EC2 hands it back, reads the same
    assert eks.parse_user_data(base64.b64encode(AL2023.encode()).decode()) == join


def test_node_from_user_data() -> None:
    info = eks.instance_info("m5.large")
    node = eks.node_from_user_data(AL2023, info, name="ip-10-0-0-1.ec2.internal", zone="us-east-1a",
                                   region="us-east-1", capacity_type="spot")
    assert node.capacity[PODS] == 20
    assert node.allocatable[MEMORY] == node.capacity[MEMORY] - GI - 200 * MI
    assert node.labels["team"] == "a"
    assert node.labels["karpenter.sh/capacity-type"] == "spot"
    assert node.labels["kubernetes.io/hostname"] == "ip-10-0-0-1.ec2.internal"
    assert node.status()["capacity"]["pods"] == "20"


def test_al2_bootstrap_kubelet_extra_args() -> None:
    script = ("#!/bin/bash -xe\n/etc/eks/bootstrap.sh demo --apiserver-endpoint https://x --use-max-pods false "
              "--kubelet-extra-args '--node-labels=a=b,c=d --register-with-taints=k=v:NoSchedule --max-pods=11 "
              "--kube-reserved=cpu=250m,memory=512Mi --eviction-hard=memory.available<300Mi'\n")
    join = eks.parse_user_data(script)
    assert join.family == "AL2"
    assert join.labels == {"a": "b", "c": "d"}
    assert join.taints == ({"key": "k", "value": "v", "effect": "NoSchedule"},)
    assert join.kubelet == Kubelet(max_pods=11, kube_reserved={"cpu": "250m", "memory": "512Mi"},
                                   eviction_hard={"memory.available": "300Mi"})


def test_bottlerocket_settings() -> None:
    toml = ('[settings.kubernetes]\ncluster-name = "demo"\nmax-pods = 30\n'
            '[settings.kubernetes.node-labels]\n"karpenter.sh/nodepool" = "default"\n'
            '[settings.kubernetes.node-taints]\n"karpenter.sh/unregistered" = [":NoExecute"]\n'
            'dedicated = ["gpu:NoSchedule"]\n')
    join = eks.parse_user_data(toml)
    assert join.family == "Bottlerocket"
    assert join.labels == {"karpenter.sh/nodepool": "default"}
    assert join.taints == ({"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                           {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})
    assert join.kubelet.max_pods == 30 and join.kubelet.memory_reserve_from == "max"


def test_unreadable_user_data_names_the_problem() -> None:
    bad = AL2023.replace("--register-with-taints=karpenter.sh/unregistered:NoExecute,",
                         "--register-with-taints=karpenter.sh/unregistered:Never,")
    with pytest.raises(eks.UserDataError, match="unregistered:Never"):
        eks.parse_user_data(bad)
    assert eks.parse_user_data(None).family == "none"
    assert eks.parse_user_data("#!/bin/bash\necho no bootstrap\n").family == "none"


def test_the_products_own_user_data_reads_back_as_it_meant() -> None:
    """The product's AL2023/AL2/Bottlerocket user data, read by this independent reader: labels, taints and
    max pods arrive at the kubelet as the product intended (a check on the product's writer)."""

    cluster = ClusterInfo(name="demo", endpoint="https://x", certificate_authority="Q0E=", k8s_version="1.31")
    join = NodeJoin(labels={"karpenter.sh/nodepool": "default", "team": "a"},
                    taints=(Taint(key="karpenter.sh/unregistered", effect="NoExecute"),),
                    kubelet=KubeletConfiguration(max_pods=40, system_reserved={"memory": "100Mi"}))
    for family in ("AL2023", "AL2", "Bottlerocket"):
        read = eks.parse_user_data(render_user_data(family=family, cluster=cluster, join=join, user_data=None))
        assert read.family == family
        assert read.labels == {"karpenter.sh/nodepool": "default", "team": "a"}, family
        assert read.taints == ({"key": "karpenter.sh/unregistered", "effect": "NoExecute"},), family
        assert read.kubelet.max_pods == 40, family


def test_eks_node_imports_nothing_from_the_product() -> None:
    tree = ast.parse(Path(eks.__file__).read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m.split(".")[0] in ("autoscaler", "simulator")}, imported
