"""Raw API JSON becomes the domain's lean models; malformed objects name the bad field."""

from __future__ import annotations

import pytest

from autoscaler.domain.instance_types import instance_type_from_ec2
from autoscaler.domain.models import Taint, Toleration
from autoscaler.domain.objects import (
    ObjectError,
    node_from_dict,
    pod_from_dict,
)


def _pod(spec: dict[str, object], **meta: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "default", **meta}, "spec": spec}


def test_effective_request_is_max_of_init_and_sum_of_app_plus_overhead() -> None:
    pod = pod_from_dict(_pod({
        "containers": [{"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                       {"resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "1Gi"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}],
        "overhead": {"cpu": "10m"},
    }))
    assert pod.requests == {"cpu": 2010, "memory": 2 * 2**30, "pods": 1}


def test_sidecar_init_containers_add_to_the_app_sum() -> None:
    pod = pod_from_dict(_pod({
        "containers": [{"resources": {"requests": {"cpu": "1"}}}],
        "initContainers": [{"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}],
    }))
    assert pod.requests["cpu"] == 1500


def test_pending_pod_fields() -> None:
    pod = pod_from_dict({
        **_pod({"containers": [{}], "nodeSelector": {"intent": "apps"},
                "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]},
               ownerReferences=[{"kind": "ReplicaSet", "name": "inflate-1", "controller": True}]),
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    })
    assert pod.is_pending and pod.unschedulable
    assert pod.node_selector == {"intent": "apps"}
    assert pod.owner is not None and pod.owner.kind == "ReplicaSet"
    assert pod.tolerations[0].tolerates(Taint("dedicated", "NoSchedule", "x"))


def test_bad_requirement_operator_names_the_field() -> None:
    spec = {"containers": [{}], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}]}}}}
    with pytest.raises(ObjectError, match=r"Pod default/p.*nodeSelectorTerms\[0\]\.matchExpressions\[0\]"):
        pod_from_dict(_pod(spec))


def test_preferred_pod_affinity_terms_with_weights() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    pod = pod_from_dict(_pod({"containers": [{}], "affinity": {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 30, "podAffinityTerm": term}]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {**term, "topologyKey": "topology.kubernetes.io/zone"}}]}}}))
    assert [(w, t.topology_key) for w, t in pod.preferred_pod_affinity] == [(30, "kubernetes.io/hostname")]
    assert [(w, t.topology_key) for w, t in pod.preferred_pod_anti_affinity] == [(100, "topology.kubernetes.io/zone")]
    assert pod.pod_affinity == () and pod.pod_anti_affinity == ()


@pytest.mark.parametrize(("entry", "message"), [
    ({"weight": 0, "podAffinityTerm": {"topologyKey": "k"}}, r"podAntiAffinity\.preferred\[0\]\.weight: must be"),
    ({"weight": 5}, r"podAntiAffinity\.preferred\[0\]\.podAffinityTerm: is required"),
    ({"weight": 5, "podAffinityTerm": {}}, r"preferred\[0\]\.podAffinityTerm: topologyKey is required"),
])
def test_bad_preferred_pod_anti_affinity_names_the_field(entry: dict[str, object], message: str) -> None:
    spec = {"containers": [{}], "affinity": {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [entry]}}}
    with pytest.raises(ObjectError, match=message):
        pod_from_dict(_pod(spec))


def test_bad_quantity_names_the_container() -> None:
    with pytest.raises(ObjectError, match=r"containers\[0\]\.resources"):
        pod_from_dict(_pod({"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}))


@pytest.mark.parametrize(
    ("tol", "taint", "ok"),
    [
        (Toleration(operator="Exists"), Taint("any", "NoSchedule"), True),
        (Toleration(key="k", value="v"), Taint("k", "NoSchedule", "v"), True),
        (Toleration(key="k", value="v"), Taint("k", "NoSchedule", "w"), False),
        (Toleration(key="k", operator="Exists", effect="NoExecute"), Taint("k", "NoSchedule"), False),
    ],
)
def test_toleration_rules(tol: Toleration, taint: Taint, ok: bool) -> None:
    assert tol.tolerates(taint) is ok


def test_node_instance_id_from_provider_id() -> None:
    node = node_from_dict({"metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "us-east-1a"}},
                           "spec": {"providerID": "aws:///us-east-1a/i-0abc", "taints": [
                               {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
                           "status": {"allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"}}})
    assert node.instance_id == "i-0abc" and node.zone == "us-east-1a"
    assert node.allocatable == {"cpu": 1930, "memory": 7 * 2**30, "pods": 29}


def test_instance_type_from_describe_instance_types() -> None:
    it = instance_type_from_ec2({
        "InstanceType": "m6g.xlarge", "ProcessorInfo": {"SupportedArchitectures": ["arm64"]},
        "VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {"SizeInMiB": 16384}, "Hypervisor": "nitro",
        "NetworkInfo": {"MaximumNetworkInterfaces": 4, "Ipv4AddressesPerInterface": 15},
        "SupportedUsageClasses": ["on-demand", "spot"],
    })
    assert it is not None
    assert (it.architecture, it.category, it.family, it.generation, it.size) == ("arm64", "m", "m6g", 6, "xlarge")
    assert instance_type_from_ec2({"InstanceType": "mac1.metal",
                                   "ProcessorInfo": {"SupportedArchitectures": ["x86_64_mac"]}}) is None
