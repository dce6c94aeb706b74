"""The well-known labels a node of an instance type carries: THE one place that defines them.

Used by the scheduler (to match pod requirements against a candidate node) and by the launcher (to
set the node's labels through the kubelet), so both agree on what a node will look like.
"""

from __future__ import annotations

from autoscaler.domain.keys import (
    ARCH_LABEL,
    CAPACITY_TYPE_LABEL,
    CATEGORY_LABEL,
    CPU_LABEL,
    FAMILY_LABEL,
    GENERATION_LABEL,
    GPU_COUNT_LABEL,
    GPU_MANUFACTURER_LABEL,
    GPU_NAME_LABEL,
    HYPERVISOR_LABEL,
    INSTANCE_TYPE_LABEL,
    MEMORY_LABEL,
    NODEPOOL_LABEL,
    OS_LABEL,
    SIZE_LABEL,
    ZONE_LABEL,
)
from autoscaler.domain.models import InstanceType


def instance_type_labels(it: InstanceType) -> dict[str, str]:
    """Labels determined by the instance type alone (no zone, capacity type or NodePool)."""
    labels = {
        ARCH_LABEL: it.architecture,
        OS_LABEL: "linux",
        INSTANCE_TYPE_LABEL: it.name,
        "beta.kubernetes.io/instance-type": it.name,
        CATEGORY_LABEL: it.category,
        FAMILY_LABEL: it.family,
        GENERATION_LABEL: str(it.generation),
        SIZE_LABEL: it.size,
        CPU_LABEL: str(it.vcpus),
        MEMORY_LABEL: str(it.memory_mib),
        HYPERVISOR_LABEL: it.hypervisor,
        GPU_COUNT_LABEL: str(it.gpu_count),
    }
    if it.gpu_count:
        labels[GPU_NAME_LABEL] = it.gpu_name.lower()
        labels[GPU_MANUFACTURER_LABEL] = it.gpu_manufacturer.lower()
    return labels


def node_labels(it: InstanceType, *, zone: str, capacity_type: str, node_pool: str) -> dict[str, str]:
    """The full well-known label set of a node of ``it`` in ``zone`` bought as ``capacity_type``."""
    labels = instance_type_labels(it)
    labels[ZONE_LABEL] = zone
    labels["failure-domain.beta.kubernetes.io/zone"] = zone
    labels[CAPACITY_TYPE_LABEL] = capacity_type
    labels[NODEPOOL_LABEL] = node_pool
    return labels
