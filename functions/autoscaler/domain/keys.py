"""Every label, taint, tag and annotation key the product reads or writes, in one place.

Kubernetes and Karpenter keys keep their upstream spelling so manifests and workloads written for
Karpenter work unchanged; the product's own keys live under ``autoscaler.eks.aws/`` (Kubernetes) and
``eks-serverless-autoscaler/`` (EC2 tags).
"""

from __future__ import annotations

# ----- well-known node labels (Kubernetes) ------------------------------------------------------
ARCH_LABEL = "kubernetes.io/arch"
OS_LABEL = "kubernetes.io/os"
HOSTNAME_LABEL = "kubernetes.io/hostname"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
INSTANCE_TYPE_LABEL_BETA = "beta.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
ZONE_LABEL_BETA = "failure-domain.beta.kubernetes.io/zone"
EBS_CSI_ZONE_LABEL = "topology.ebs.csi.aws.com/zone"
# Keys that name an availability zone: a requirement on any of them is a zone requirement.
ZONE_KEYS = frozenset({ZONE_LABEL, ZONE_LABEL_BETA, EBS_CSI_ZONE_LABEL})

# ----- Karpenter labels -------------------------------------------------------------------------
NODEPOOL_LABEL = "karpenter.sh/nodepool"
PROVISIONER_NAME_LABEL = "karpenter.sh/provisioner-name"  # v1alpha5 (Karpenter v0.2x) nodes
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
# Set by the lifecycle step once a node is Ready without registration or startup taints (Karpenter's label).
INITIALIZED_LABEL = "karpenter.sh/initialized"
CATEGORY_LABEL = "karpenter.k8s.aws/instance-category"
FAMILY_LABEL = "karpenter.k8s.aws/instance-family"
GENERATION_LABEL = "karpenter.k8s.aws/instance-generation"
SIZE_LABEL = "karpenter.k8s.aws/instance-size"
CPU_LABEL = "karpenter.k8s.aws/instance-cpu"
MEMORY_LABEL = "karpenter.k8s.aws/instance-memory"
HYPERVISOR_LABEL = "karpenter.k8s.aws/instance-hypervisor"
GPU_COUNT_LABEL = "karpenter.k8s.aws/instance-gpu-count"
GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
# Reserved capacity (Karpenter v1): on nodes launched into an On-Demand Capacity Reservation or Capacity Block.
CAPACITY_RESERVATION_ID_LABEL = "karpenter.k8s.aws/capacity-reservation-id"
CAPACITY_RESERVATION_TYPE_LABEL = "karpenter.k8s.aws/capacity-reservation-type"
GPU_MANUFACTURER_LABEL = "karpenter.k8s.aws/instance-gpu-manufacturer"

# Requirements on any of these keys narrow instance selection, so Karpenter's default
# category/generation requirement is not added on top of them.
INSTANCE_SHAPE_KEYS = frozenset({
    INSTANCE_TYPE_LABEL, INSTANCE_TYPE_LABEL_BETA, CATEGORY_LABEL, FAMILY_LABEL, GENERATION_LABEL, SIZE_LABEL,
    CPU_LABEL, MEMORY_LABEL, GPU_COUNT_LABEL, GPU_NAME_LABEL, HYPERVISOR_LABEL,
})

# Keys whose value a candidate node gets from its instance type and offering, never from a NodePool.
WELL_KNOWN_KEYS = frozenset({
    ARCH_LABEL, OS_LABEL, INSTANCE_TYPE_LABEL, INSTANCE_TYPE_LABEL_BETA, ZONE_LABEL, ZONE_LABEL_BETA,
    CAPACITY_TYPE_LABEL, NODEPOOL_LABEL, CATEGORY_LABEL, FAMILY_LABEL, GENERATION_LABEL, SIZE_LABEL, CPU_LABEL,
    MEMORY_LABEL, HYPERVISOR_LABEL, GPU_COUNT_LABEL, GPU_NAME_LABEL, GPU_MANUFACTURER_LABEL,
})

# Every key a NodePool requirement or template label may use in the reserved label families, so a typo
# (``karpenter.k8s.aws/instance-categroy``) is caught at validation instead of matching nothing.
KNOWN_LABEL_KEYS = WELL_KNOWN_KEYS | frozenset({
    HOSTNAME_LABEL, EBS_CSI_ZONE_LABEL, PROVISIONER_NAME_LABEL, INITIALIZED_LABEL,
    "karpenter.sh/registered", "karpenter.sh/do-not-sync-taints", "karpenter.sh/nodeclaim",
    "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region", "topology.k8s.aws/zone-id",
    "beta.kubernetes.io/arch", "beta.kubernetes.io/os", "node.kubernetes.io/windows-build",
    "node.kubernetes.io/exclude-from-external-load-balancers", "node.kubernetes.io/exclude-disruption",
    "karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-encryption-in-transit-supported", "karpenter.k8s.aws/instance-capability-flex",
    "karpenter.k8s.aws/instance-cpu-manufacturer", "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-ebs-bandwidth", "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-gpu-memory", "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer", "karpenter.k8s.aws/instance-accelerator-count",
    "karpenter.k8s.aws/instance-tenancy", "karpenter.k8s.aws/nitro-sandbox",
    CAPACITY_RESERVATION_ID_LABEL, CAPACITY_RESERVATION_TYPE_LABEL,
    "karpenter.k8s.aws/placement-group-id", "karpenter.k8s.aws/placement-group-partition",
})
# Label prefixes reserved by Kubernetes and Karpenter: a key under them must be one of KNOWN_LABEL_KEYS.
RESERVED_LABEL_PREFIXES = ("karpenter.sh/", "karpenter.k8s.aws/", "kubernetes.io/", "topology.kubernetes.io/",
                           "topology.k8s.aws/", "beta.kubernetes.io/", "failure-domain.beta.kubernetes.io/")
# Prefixes where custom keys are allowed (Karpenter's label-domain exceptions), so only near-misses of a
# known key are flagged.
OPEN_LABEL_PREFIXES = ("node.kubernetes.io/",)

# ----- pod and node annotations -----------------------------------------------------------------
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
# The product's node-state record (``domain/node_state.py``): who started what on a node, when, why.
OWNER_ANNOTATION = "autoscaler.eks.aws/owner"
DRAIN_STARTED_ANNOTATION = "autoscaler.eks.aws/drain-started"
DRAIN_REASON_ANNOTATION = "autoscaler.eks.aws/drain-reason"
REPLACEMENT_REQUESTED_ANNOTATION = "autoscaler.eks.aws/replacement-requested"
# Which interruption invocation is carrying the drain out, and until when (epoch seconds) it may: another
# invocation leaves the node alone until then (owner: interruption).
DRAIN_HOLDER_ANNOTATION = "autoscaler.eks.aws/drain-holder"
DRAIN_HELD_UNTIL_ANNOTATION = "autoscaler.eks.aws/drain-held-until"
# The replacement request the provisioner has planned capacity for (owner: provisioner).
REPLACEMENT_PROVISIONED_ANNOTATION = "autoscaler.eks.aws/replacement-provisioned"
# Since when the disruption function has seen a node empty (owner: disruption).
EMPTY_SINCE_ANNOTATION = "autoscaler.eks.aws/empty-since"

# Karpenter's finalizer on the Nodes it launched: its termination controller removes it after draining.
# Once Karpenter is scaled to zero nobody does, so deleting an adopted node removes it (docs/migration.md).
KARPENTER_TERMINATION_FINALIZER = "karpenter.sh/termination"

# ----- taint keys (the Taint values live beside the Taint model in ``models.py``) ----------------
# Every launched node starts with this NoExecute taint; removed once the node registers (Karpenter's rule).
UNREGISTERED_TAINT_KEY = "karpenter.sh/unregistered"
# Karpenter v1's taint for nodes being disrupted, so workloads that tolerate Karpenter's tolerate ours.
DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
# Taints the node lifecycle controller and kubelet put on a node that is not (yet) usable.
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT_KEY = "node.kubernetes.io/unreachable"
UNINITIALIZED_TAINT_KEY = "node.cloudprovider.kubernetes.io/uninitialized"

# ----- EC2 resource tags (DESIGN.md "Resource tags on everything launched") ----------------------
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
EKS_CLUSTER_TAG = "eks:eks-cluster-name"
NODEPOOL_TAG = NODEPOOL_LABEL
PROVISIONER_NAME_TAG = PROVISIONER_NAME_LABEL  # on instances Karpenter v0.2x launched
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
# Drift: hashes of the launch-relevant NodePool template and EC2NodeClass spec, written at launch as instance
# tags (Karpenter writes them as NodeClaim/Node annotations; the tags reach the disruption function with the
# instance listing it already makes).
NODEPOOL_HASH_TAG = "karpenter.sh/nodepool-hash"
NODECLASS_HASH_TAG = "karpenter.k8s.aws/ec2nodeclass-hash"
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
NAME_TAG = "Name"
MANAGED_BY_TAG = "eks-serverless-autoscaler/managed-by"
# The pods a launch was made for, spread over numbered tags (a tag value holds 256 characters).
PODS_TAG_PREFIX = "eks-serverless-autoscaler/pods-"
