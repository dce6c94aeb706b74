"""Issue 33: configurations a new user writes that were accepted silently (items 4, 13, 22)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from autoscaler.config import ProvisionerConfig


@pytest.mark.parametrize("value", ["30s", "59s", "0s"])
def test_item13_registration_timeout_under_the_claim_settle_window_is_refused(value: str) -> None:
    # Given a registrationTimeout shorter than the 60 s a launch's claim settles for
    # Then the file is refused, naming the minimum (a shorter timeout would terminate an instance its
    # claim still counts as in-flight capacity, and the next pass would launch it again)
    with pytest.raises(ValidationError, match=re.escape("must be at least 60s")):
        ProvisionerConfig.model_validate({"registrationTimeout": value})


@pytest.mark.parametrize("value", ["60s", "1m", "15m"])
def test_item13_registration_timeout_of_a_minute_or_more_is_accepted(value: str) -> None:
    given: dict[str, Any] = {"registrationTimeout": value}
    assert ProvisionerConfig.model_validate(given).registration_timeout == value


# --- item 22: what was accepted silently -------------------------------------------------------------

def _pool(**spec: Any) -> dict[str, Any]:
    template_spec = {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     **spec.pop("template_spec", {})}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "apps"},
            "spec": {"template": {"spec": template_spec}, **spec}}


def _problems(obj: dict[str, Any]) -> list[tuple[str, str]]:
    from autoscaler.domain.manifest_check import check_node_pools
    return [(p.severity, p.render()) for p in check_node_pools([obj])]


def test_item22_expire_after_zero_is_a_warning() -> None:
    found = _problems(_pool(template_spec={"expireAfter": "0s"}))
    assert [s for s, _ in found] == ["warning"], found
    assert "expireAfter: '0s' expires every node of this NodePool as soon as it is launched" in found[0][1]


def test_item22_requirements_no_instance_type_satisfies_are_an_error_naming_them() -> None:
    found = _problems(_pool(template_spec={"requirements": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5"]}]}))
    errors = [m for s, m in found if s == "error"]
    assert len(errors) == 1, found
    assert "no instance type satisfies" in errors[0]
    assert "kubernetes.io/arch In [arm64]" in errors[0] and "karpenter.k8s.aws/instance-family In [c5]" in errors[0]


def test_item22_satisfiable_and_unknown_families_are_not_refused() -> None:
    for reqs in ([{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                  {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c7g"]}],
                 [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c99"]}]):
        found = _problems(_pool(template_spec={"requirements": reqs}))
        assert not [m for s, m in found if s == "error"], found


def test_item22_node_class_ref_group_other_than_karpenter_k8s_aws_is_an_error() -> None:
    obj = _pool()
    obj["spec"]["template"]["spec"]["nodeClassRef"]["group"] = "karpenter.sh"
    found = _problems(obj)
    assert any(s == "error" and "nodeClassRef.group: 'karpenter.sh'" in m and "karpenter.k8s.aws" in m
               for s, m in found), found


@pytest.mark.parametrize("weight", [0, 101])
def test_item22_weight_outside_karpenters_bounds_is_an_error(weight: int) -> None:
    found = _problems(_pool(weight=weight))
    assert any(s == "error" and "spec.weight" in m for s, m in found), found


def test_item22_snapshot_pod_without_metadata_is_a_finding() -> None:
    from autoscaler.domain.errors import ConfigError
    from autoscaler.domain.snapshot import parse_snapshot
    with pytest.raises(ConfigError) as exc:
        parse_snapshot({"pods": [{"spec": {"containers": [{"name": "a", "image": "x"}]}}]})
    assert "pods[0]" in str(exc.value) and "metadata.name is missing" in str(exc.value), str(exc.value)


# --- item 4: limits.nodes ----------------------------------------------------------------------------

def test_item4_limits_nodes_is_accepted_and_never_corrected_to_another_resource() -> None:
    assert _problems(_pool(limits={"nodes": 3, "cpu": 100})) == []
    # a misspelling is still caught, and pointed at the right resource
    found = _problems(_pool(limits={"nodse": 3}))
    assert any("did you mean 'nodes'?" in m for _, m in found), found


def test_item4_suggestions_never_propose_a_different_resource_for_a_valid_one() -> None:
    from autoscaler.domain.karpenter_schema import LIMIT_RESOURCES
    for name in LIMIT_RESOURCES:
        assert _problems(_pool(limits={name: 1})) == [], name


def test_item4_limits_nodes_caps_the_planned_launches() -> None:
    from autoscaler.domain.scheduling.planner import plan
    from tests.domain.scheduling_world import pod, pool, world
    # Given a NodePool limited to 2 nodes and 4 pods that each need a node of their own
    pods = [pod(f"big-{i}", cpu=3000, app="big", node_selector={"node.kubernetes.io/instance-type": "c5.xlarge"})
            for i in range(4)]
    result = plan(world(pods, pools=[pool(limits={"nodes": 2})]))
    # Then 2 nodes are planned and the other pods are reported unschedulable
    assert len(result.launches) == 2
    assert len(result.unschedulable) == 2
