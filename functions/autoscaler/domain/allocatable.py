"""What a node of an instance type can give to pods: THE one place for the EKS-optimised AMI formula.

capacity  = vCPUs, memory less the hypervisor's share (7.5%, as Karpenter assumes), root volume, max pods
allocatable = capacity - kube-reserved - system-reserved - hard eviction thresholds, where
  max pods      = ENIs * (IPv4 addresses per ENI - 1) + 2, or kubelet maxPods, capped by podsPerCore * vCPUs
                  (not on Bottlerocket, whose settings have no pods-per-core)
  kube-reserved = memory 255Mi + 11Mi * P; CPU 6% of the first core, 1% of the second,
                  0.5% of cores 3-4 and 0.25% of every further core; ephemeral-storage 1Gi
  eviction      = memory.available 100Mi, nodefs.available 10%
P is what the AMI's bootstrap computes the reservation from: the instance type's ENI max pods on AL2
(bootstrap.sh reads eni-max-pods.txt) and AL2023 (nodeadm), whatever kubelet ``maxPods`` says, and the node's
max pods on Bottlerocket (its kube-reserved default follows its max-pods setting). Karpenter v1 models it
the same way (its AMI families' ``UsesENILimitedMemoryOverhead``). With ``maxPods`` below the ENI limit the
AL2 / AL2023 kubelet therefore holds back more memory than ``255Mi + 11Mi * maxPods``, and so does the plan.
Kubelet ``kubeReserved`` replaces the computed value per resource, ``systemReserved`` is added, and
``evictionHard`` replaces the thresholds (absolute or percentage).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from autoscaler.domain import resources as res
from autoscaler.domain.models import InstanceType
from autoscaler.domain.nodeclass import KubeletConfiguration
from autoscaler.domain.quantity import cpu_millis, to_int

MI = 2**20
GI = 2**30
VM_MEMORY_OVERHEAD = 0.075
DEFAULT_ROOT_VOLUME = 20 * GI


def eni_max_pods(it: InstanceType) -> int:
    return it.max_enis * (it.ipv4_per_eni - 1) + 2


# The AMI family whose bootstrap reserves kube-reserved memory from the node's own max pods and whose
# settings have no pods-per-core (userdata.py writes none for it).
_MAX_PODS_FAMILY = "Bottlerocket"


def max_pods(it: InstanceType, kubelet: KubeletConfiguration | None = None, *, ami_family: str | None = None) -> int:
    pods = kubelet.max_pods if kubelet and kubelet.max_pods else eni_max_pods(it)
    if kubelet and kubelet.pods_per_core and ami_family != _MAX_PODS_FAMILY:
        pods = min(pods, kubelet.pods_per_core * it.vcpus)
    return max(pods, 0)


def reserved_memory_pods(it: InstanceType, kubelet: KubeletConfiguration | None = None, *,
                         ami_family: str | None = None) -> int:
    """The max pods the AMI's bootstrap computes kube-reserved memory from (see the module's docstring)."""
    if ami_family == _MAX_PODS_FAMILY:
        return max_pods(it, kubelet, ami_family=ami_family)
    return eni_max_pods(it)


def kube_reserved_cpu_millis(vcpus: int) -> int:
    """The AMI's per-core scale: 60m + 10m + 5m + 5m + 2.5m for each core above four."""
    millis = 0.0
    for core in range(vcpus):
        millis += 60 if core == 0 else 10 if core == 1 else 5 if core < 4 else 2.5
    return math.ceil(millis)


def capacity(it: InstanceType, *, kubelet: KubeletConfiguration | None = None,
             root_volume_bytes: int | None = None, ami_family: str | None = None) -> res.Resources:
    mem_mib = it.memory_mib - math.ceil(it.memory_mib * VM_MEMORY_OVERHEAD)
    out = {
        res.CPU: it.vcpus * 1000,
        res.MEMORY: mem_mib * MI,
        res.EPHEMERAL_STORAGE: root_volume_bytes or DEFAULT_ROOT_VOLUME,
        res.PODS: max_pods(it, kubelet, ami_family=ami_family),
    }
    if it.gpu_count and it.gpu_manufacturer.lower() == "nvidia":
        out[res.NVIDIA_GPU] = it.gpu_count
    return out


def _quantities(raw: Mapping[str, str] | None) -> res.Resources:
    return res.parse_resource_list(raw) if raw else {}


def _threshold(value: str | None, total: int, default: int) -> int:
    if value is None:
        return default
    if value.endswith("%"):
        return -(-total * round(float(value[:-1]) * 100) // 10000)
    return to_int(value)


def allocatable(it: InstanceType, *, kubelet: KubeletConfiguration | None = None,
                root_volume_bytes: int | None = None, ami_family: str | None = None) -> res.Resources:
    """``ami_family``: the EC2NodeClass's (None: AL2023, the default alias)."""
    cap = capacity(it, kubelet=kubelet, root_volume_bytes=root_volume_bytes, ami_family=ami_family)
    kube_reserved = {
        res.CPU: kube_reserved_cpu_millis(it.vcpus),
        res.MEMORY: (255 + 11 * reserved_memory_pods(it, kubelet, ami_family=ami_family)) * MI,
        res.EPHEMERAL_STORAGE: 1 * GI,
    }
    if kubelet and kubelet.kube_reserved:
        overrides = {k: cpu_millis(v) if k == res.CPU else to_int(v) for k, v in kubelet.kube_reserved.items()}
        kube_reserved.update(overrides)
    system_reserved = _quantities(kubelet.system_reserved if kubelet else None)
    hard = (kubelet.eviction_hard if kubelet else None) or {}
    eviction = {
        res.MEMORY: _threshold(hard.get("memory.available"), cap[res.MEMORY], 100 * MI),
        res.EPHEMERAL_STORAGE: _threshold(hard.get("nodefs.available"), cap[res.EPHEMERAL_STORAGE],
                                          -(-cap[res.EPHEMERAL_STORAGE] // 10)),
    }
    out = res.subtract(res.subtract(res.subtract(cap, kube_reserved), system_reserved), eviction)
    return {k: max(v, 0) for k, v in out.items()}
