"""Ownership: the EC2 tags that make an instance this cluster's autoscaler's, and the pod-key codec that
records on an instance which pods it was launched for. An instance without the ownership tags is never
touched; the tags are the product's only state in EC2.

The one exception is opt-in (``migration.adoptKarpenterNodes``, docs/migration.md): instances Karpenter
launched for this cluster (a ``karpenter.sh/nodepool`` or v0.2x ``karpenter.sh/provisioner-name`` tag plus
the cluster's tag, and no managed-by tag) are then adopted and disrupted and terminated like ours."""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.domain.keys import (
    CLUSTER_TAG_PREFIX,
    EKS_CLUSTER_TAG,
    MANAGED_BY_TAG,
    NAME_TAG,
    NODECLAIM_TAG,
    NODECLASS_TAG,
    NODEPOOL_TAG,
    PODS_TAG_PREFIX,
    PROVISIONER_NAME_TAG,
)

MAX_POD_TAGS = 20
# EC2 allows 50 tags per resource; the autoscaler writes 9 of its own (cluster, eks:eks-cluster-name,
# managed-by, NodePool, EC2NodeClass, node claim, Name, and the two drift hashes), the EC2NodeClass's
# tags come next, and pod keys get what is left, up to MAX_POD_TAGS.
EC2_TAG_LIMIT = 50
OWN_TAG_COUNT = 9


def user_tag_count(node_class_tags: Mapping[str, str]) -> int:
    """Tags an EC2NodeClass adds to the autoscaler's own (its ``Name`` replaces ours)."""
    return len([k for k in node_class_tags if k != NAME_TAG])


def pod_tag_budget(node_class_tags: Mapping[str, str]) -> int:
    """How many pod-key tags fit on an instance of this node class within EC2's limit."""
    return max(0, min(MAX_POD_TAGS, EC2_TAG_LIMIT - OWN_TAG_COUNT - user_tag_count(node_class_tags)))


def pod_tags(pod_keys: list[str] | tuple[str, ...], *, max_tags: int = MAX_POD_TAGS) -> dict[str, str]:
    """``ns/name`` keys packed space-separated into at most ``max_tags`` tags of <= 256 chars. Keys that
    do not fit are left out (the caller logs how many): those pods are then placed afresh by the next
    pass, which still fills in-flight capacity before opening new nodes."""
    if max_tags <= 0:
        return {}
    tags: dict[str, str] = {}
    current = ""
    for key in pod_keys:
        if len(key) > 256:
            continue
        candidate = f"{current} {key}" if current else key
        if len(candidate) <= 256:
            current = candidate
            continue
        tags[f"{PODS_TAG_PREFIX}{len(tags)}"] = current
        current = key
        if len(tags) >= max_tags:
            return tags
    if current and len(tags) < max_tags:
        tags[f"{PODS_TAG_PREFIX}{len(tags)}"] = current
    return tags


def pods_from_tags(tags: Mapping[str, str]) -> tuple[str, ...]:
    """The pod keys :func:`pod_tags` wrote, in order."""
    numbered = sorted((int(k[len(PODS_TAG_PREFIX):]), v) for k, v in tags.items()
                      if k.startswith(PODS_TAG_PREFIX) and k[len(PODS_TAG_PREFIX):].isdigit())
    return tuple(key for _, value in numbered for key in value.split())


def cluster_tag(cluster_name: str) -> str:
    return f"{CLUSTER_TAG_PREFIX}{cluster_name}"


def ownership_tags(cluster_name: str) -> dict[str, str]:
    """The tags that make a resource this cluster's autoscaler's (checked before any termination)."""
    return {
        cluster_tag(cluster_name): "owned",
        EKS_CLUSTER_TAG: cluster_name,
        MANAGED_BY_TAG: cluster_name,
    }


def launch_tags(
    *, cluster_name: str, node_pool: str, node_class: str, claim_id: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """All tags for a launched instance, its volumes and its fleet. ``extra`` (the EC2NodeClass's own
    tags) cannot override the autoscaler's keys: ownership must stay trustworthy."""
    tags = dict(extra or {})
    tags.setdefault(NAME_TAG, f"{cluster_name}/{claim_id}")
    tags.update(ownership_tags(cluster_name))
    tags.update({NODEPOOL_TAG: node_pool, NODECLASS_TAG: node_class, NODECLAIM_TAG: claim_id})
    return tags


def karpenter_node_pool(tags: Mapping[str, str]) -> str | None:
    """The NodePool of an instance Karpenter launched: its ``karpenter.sh/nodepool`` tag (v1, v1beta1), else
    the v1alpha5 Provisioner of its ``karpenter.sh/provisioner-name`` tag, converted to the NodePool of the
    same name; None when it has neither."""
    return tags.get(NODEPOOL_TAG) or tags.get(PROVISIONER_NAME_TAG) or None


def launched_by_karpenter(tags: Mapping[str, str], cluster_name: str) -> bool:
    """Karpenter launched it for this cluster: a NodePool or Provisioner tag and the cluster's tag
    (``kubernetes.io/cluster/<name>: owned`` or ``eks:eks-cluster-name``), without our managed-by tag."""
    if MANAGED_BY_TAG in tags or karpenter_node_pool(tags) is None:
        return False
    return tags.get(cluster_tag(cluster_name)) == "owned" or tags.get(EKS_CLUSTER_TAG) == cluster_name


def ownership_problem(tags: Mapping[str, str], cluster_name: str, *, adopt_karpenter: bool = False) -> str | None:
    """Why a resource with these tags is NOT this cluster's autoscaler's, or None when it is. With
    ``adopt_karpenter`` an instance Karpenter launched for this cluster counts as ours."""
    if adopt_karpenter and launched_by_karpenter(tags, cluster_name):
        return None
    for key, want in ownership_tags(cluster_name).items():
        got = tags.get(key)
        if got != want:
            hint = (" (launched by Karpenter: set migration.adoptKarpenterNodes to manage it)"
                    if launched_by_karpenter(tags, cluster_name) else "")
            return f"tag {key!r} is {got!r}, expected {want!r}{hint}"
    return None


def is_owned(tags: Mapping[str, str], cluster_name: str, *, adopt_karpenter: bool = False) -> bool:
    return ownership_problem(tags, cluster_name, adopt_karpenter=adopt_karpenter) is None


class OwnershipError(RuntimeError):
    """Refused to act on a resource that does not carry this cluster's ownership tags."""

    def __init__(self, instance_id: str, reason: str) -> None:
        super().__init__(f"instance {instance_id} is not owned by this autoscaler ({reason}); refusing to touch it")
        self.instance_id = instance_id
        self.reason = reason
