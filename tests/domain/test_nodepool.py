"""NodePool / Provisioner manifests validate, convert to one NodePool, and get Karpenter's defaults."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.errors import ConfigError
from autoscaler.domain.models import Requirement, Taint
from autoscaler.domain.nodepool import parse_duration, parse_node_pool, parse_node_pools, requirement_allows


def _v1(name: str = "default", **spec: Any) -> dict[str, Any]:
    template_spec = {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    template_spec.update(spec.pop("template_spec", {}))
    body: dict[str, Any] = {"template": {"spec": template_spec}}
    body.update(spec)
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": body}


def test_v1_full_nodepool() -> None:
    pool = parse_node_pool(_v1(
        weight=50, limits={"cpu": "1000", "memory": "1000Gi"},
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s",
                    "budgets": [{"nodes": "10%"}, {"nodes": 0, "schedule": "0 9 * * 1-5", "duration": "8h",
                                                   "reasons": ["Underutilized"]}]},
        template_spec={
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                             {"key": "karpenter.k8s.aws/instance-family", "operator": "In",
                              "values": ["m5", "m6i", "c5"], "minValues": 2}],
            "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "cilium", "effect": "NoExecute"}],
            "expireAfter": "Never",
        }))
    assert pool.weight == 50
    assert pool.limits == {"cpu": 1_000_000, "memory": 1000 * 2**30}
    assert pool.disruption.consolidation_policy == "WhenEmpty"
    assert pool.disruption.consolidate_after == 30
    assert pool.disruption.expire_after is None
    assert pool.disruption.budgets[1].duration == 8 * 3600
    assert pool.taints == (Taint("dedicated", "NoSchedule", "gpu"),)
    assert pool.startup_taints == (Taint("cilium", "NoExecute"),)
    assert pool.capacity_types == ("spot",)
    family = pool.requirement("karpenter.k8s.aws/instance-family")
    assert family is not None and family.min_values == 2
    # shape narrowed by the family requirement: no default category/generation
    assert pool.requirement("karpenter.k8s.aws/instance-category") is None
    assert pool.requirement("kubernetes.io/arch") == Requirement("kubernetes.io/arch", "In", ("amd64",))


def test_defaults_when_no_requirements() -> None:
    pool = parse_node_pool(_v1())
    keys = {r.key: r for r in pool.requirements}
    assert keys["kubernetes.io/os"].values == ("linux",)
    assert keys["kubernetes.io/arch"].values == ("amd64",)
    assert keys["karpenter.sh/capacity-type"].values == ("on-demand",)
    assert keys["karpenter.k8s.aws/instance-category"].values == ("c", "m", "r")
    assert keys["karpenter.k8s.aws/instance-generation"] == Requirement(
        "karpenter.k8s.aws/instance-generation", "Gt", ("2",))
    assert pool.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert pool.disruption.expire_after == 720 * 3600
    assert pool.capacity_types == ("on-demand",)


@pytest.mark.parametrize(
    ("spec", "ttl_empty", "policy", "after", "expire"),
    [
        ({"ttlSecondsAfterEmpty": 30, "ttlSecondsUntilExpired": 2592000}, True, "WhenEmpty", 30, 2592000),
        ({"consolidation": {"enabled": True}}, False, "WhenEmptyOrUnderutilized", 0, None),
        ({}, False, "WhenEmpty", None, None),
    ],
)
def test_v1alpha5_provisioner_converts(spec: dict[str, Any], ttl_empty: bool, policy: str, after: int | None,
                                       expire: int | None) -> None:
    body = {"providerRef": {"name": "legacy"}, "labels": {"intent": "apps"},
            "kubeletConfiguration": {"maxPods": 30}, "limits": {"resources": {"cpu": 100}},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}], **spec}
    pool = parse_node_pool({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
                            "metadata": {"name": "p"}, "spec": body})
    assert pool.node_class_ref == "legacy"
    assert pool.labels == {"intent": "apps"}
    assert pool.kubelet is not None and pool.kubelet.max_pods == 30
    assert pool.limits == {"cpu": 100_000}
    assert pool.disruption.consolidation_policy == policy
    assert pool.disruption.consolidate_after == after
    assert pool.disruption.expire_after == expire
    assert ttl_empty == ("ttlSecondsAfterEmpty" in spec)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (_v1(weight=101), r"NodePool default: spec.weight: .*less than or equal to 100"),
        (_v1(template_spec={"requirements": [{"key": "a", "operator": "Near"}]}),
         r"NodePool default: spec.template.spec.requirements.0.operator"),
        (_v1(template_spec={"requirements": [{"key": "a", "operator": "In"}]}),
         r"requirements.0: .*operator In needs at least one value"),
        (_v1(template_spec={"requirements": [{"key": "a", "operator": "Gt", "values": ["x"]}]}),
         r"operator Gt needs exactly one integer value"),
        (_v1(template_spec={"requirements": [{"key": "a", "operator": "In", "values": ["x"], "minValues": 2}]}),
         r"minValues 2 is more than the 1 values"),
        (_v1(template_spec={"taints": [{"key": "a", "effect": "Sometimes"}]}), r"spec.template.spec.taints.0.effect"),
        (_v1(limits={"cpu": "lots"}), r"NodePool default: spec.limits: not a quantity: .lots."),
        (_v1(disruption={"consolidateAfter": "soon"}), r"disruption.consolidateAfter: 'soon' is not a duration"),
        (_v1(disruption={"budgets": [{"nodes": "150%"}]}), r"budgets.0.nodes"),
        (_v1(disruption={"budgets": [{"nodes": 1, "schedule": "@daily"}]}), r"schedule and duration"),
        ({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"},
          "spec": {"template": {"spec": {}}}}, r"NodePool x: spec.template.spec.nodeClassRef: Field required"),
        ({"kind": "NodePool", "metadata": {}, "spec": {}}, r"metadata.name is required"),
        ({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "p"},
          "spec": {"provider": {"subnetSelector": {}}}}, r"Provisioner p: spec.*provider .*not supported"),
        ({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "p"},
          "spec": {"ttlSecondsAfterEmpty": 30, "consolidation": {"enabled": True}}}, r"mutually exclusive"),
    ],
)
def test_invalid_nodepools_name_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_node_pool(obj)


def test_pools_sorted_by_weight_and_duplicates_rejected() -> None:
    pools = parse_node_pools([_v1("a"), _v1("b", weight=10)])
    assert [p.name for p in pools] == ["b", "a"]
    with pytest.raises(ConfigError, match="defined twice"):
        parse_node_pools([_v1("a"), _v1("a")])


@pytest.mark.parametrize(
    ("value", "seconds"), [("30s", 30), ("5m", 300), ("720h", 2592000), ("1h30m", 5400), ("Never", None)])
def test_durations(value: str, seconds: int | None) -> None:
    assert parse_duration(value, field="x") == seconds


@pytest.mark.parametrize(
    ("req", "value", "ok"),
    [
        (Requirement("k", "In", ("a",)), "a", True), (Requirement("k", "In", ("a",)), "b", False),
        (Requirement("k", "In", ("a",)), None, False),
        (Requirement("k", "NotIn", ("a",)), "b", True), (Requirement("k", "NotIn", ("a",)), "a", False),
        (Requirement("k", "NotIn", ("a",)), None, True),
        (Requirement("k", "Exists"), "x", True), (Requirement("k", "Exists"), None, False),
        (Requirement("k", "DoesNotExist"), None, True), (Requirement("k", "DoesNotExist"), "x", False),
        (Requirement("k", "Gt", ("2",)), "3", True), (Requirement("k", "Gt", ("2",)), "2", False),
        (Requirement("k", "Lt", ("2",)), "1", True), (Requirement("k", "Lt", ("2",)), "x", False),
    ],
)
def test_requirement_operators(req: Requirement, value: str | None, ok: bool) -> None:
    assert requirement_allows(req, value) is ok


def test_static_nodepool_replicas_and_node_limit() -> None:
    # GIVEN a Karpenter v1.x static NodePool WHEN parsed THEN replicas and limits.nodes are kept
    pool = parse_node_pool(_v1(replicas=3, limits={"nodes": 5}))
    assert pool.replicas == 3 and pool.is_static and pool.limits == {"nodes": 5}
    assert not parse_node_pool(_v1()).is_static


@pytest.mark.parametrize(("spec", "message"), [
    ({"replicas": 2, "limits": {"cpu": "10", "nodes": 3}}, r"only 'limits.nodes' is supported on static .*remove cpu"),
    ({"replicas": 2, "weight": 10}, r"'weight' is not supported on static NodePools"),
    ({"replicas": -1}, r"replicas"),
])
def test_static_nodepool_rejects_what_karpenter_rejects(spec: dict[str, Any], message: str) -> None:
    # GIVEN a static NodePool with a field Karpenter's validation refuses WHEN parsed THEN the error names it
    with pytest.raises(ConfigError, match=message):
        parse_node_pool(_v1(**spec))
