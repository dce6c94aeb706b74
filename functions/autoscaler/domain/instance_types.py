"""An ``InstanceType`` from EC2's DescribeInstanceTypes ``InstanceTypeInfo``: the one conversion the catalogue
adapter and snapshots use; types no Kubernetes node runs on are left out."""

from __future__ import annotations

from typing import Any, cast

from autoscaler.domain.models import InstanceType
from autoscaler.domain.objects import ObjectError, Raw

_ARCH = {"x86_64": "amd64", "arm64": "arm64"}


def instance_type_from_ec2(info: Raw) -> InstanceType | None:
    """Convert a DescribeInstanceTypes ``InstanceTypeInfo``; None for types we cannot run nodes on
    (32-bit only, Mac, or no architecture Kubernetes nodes use)."""
    name = str(info.get("InstanceType") or "")
    if not name:
        raise ObjectError("InstanceTypeInfo: InstanceType is missing")
    archs = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ()
    arch = next((_ARCH[a] for a in archs if a in _ARCH), None)
    if arch is None or name.startswith("mac"):
        return None
    vcpu = (info.get("VCpuInfo") or {}).get("DefaultVCpus")
    mem = (info.get("MemoryInfo") or {}).get("SizeInMiB")
    if not vcpu or not mem:
        raise ObjectError(
            f"InstanceTypeInfo {name}: VCpuInfo.DefaultVCpus and MemoryInfo.SizeInMiB are required"
        )
    net = info.get("NetworkInfo") or {}
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or ()
    usage = set(info.get("SupportedUsageClasses") or ("on-demand", "spot"))
    storage = info.get("InstanceStorageInfo") or {}
    return InstanceType(
        name=name,
        architecture=cast(Any, arch),
        vcpus=int(vcpu),
        memory_mib=int(mem),
        max_enis=int(net.get("MaximumNetworkInterfaces") or 1),
        ipv4_per_eni=int(net.get("Ipv4AddressesPerInterface") or 1),
        gpu_count=sum(int(g.get("Count") or 0) for g in gpus),
        gpu_manufacturer=str(gpus[0].get("Manufacturer") or "") if gpus else "",
        gpu_name=str(gpus[0].get("Name") or "") if gpus else "",
        gpu_memory_mib=sum(int((g.get("MemoryInfo") or {}).get("SizeInMiB") or 0) for g in gpus),
        hypervisor=str(info.get("Hypervisor") or ""),
        bare_metal=bool(info.get("BareMetal")),
        local_storage_gib=int(storage.get("TotalSizeInGB") or 0),
        network_bandwidth=str(net.get("NetworkPerformance") or ""),
        supports_spot="spot" in usage,
        supports_on_demand="on-demand" in usage,
        current_generation=bool(info.get("CurrentGeneration", True)),
    )
