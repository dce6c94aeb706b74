"""The cluster file's migration settings: a default node role name that cannot collide with Karpenter's,
reusing Karpenter's role by name, the message for an EC2NodeClass that names Karpenter's role, and the
``migration.adoptKarpenterNodes`` switch."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config import ConfigError, default_node_role_name, parse_cluster_config

DEMO = Path(__file__).resolve().parents[2] / "clusters" / "demo.yaml"


@pytest.fixture
def raw() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEMO.read_text())
    return data


@pytest.mark.parametrize("cluster", ["demo", "prod-blue", "c" * 44, "c" * 45, "x" * 100])
def test_the_default_node_role_is_never_karpenters_and_fits_iam(cluster: str) -> None:
    # Given a cluster name of any allowed length; When the default node role is named
    name = default_node_role_name(cluster)
    # Then it is not Karpenter's getting-started role, fits IAM's 64 characters and stays unique
    assert name != f"KarpenterNodeRole-{cluster}" and not name.startswith("KarpenterNodeRole")
    assert len(name) <= 64 and name.startswith("eks-autoscaler-node-")
    assert default_node_role_name(cluster + "y") != name


def test_an_ec2nodeclass_naming_karpenters_role_gets_both_fixes(raw: dict[str, Any]) -> None:
    # Given Karpenter's EC2NodeClass as the guides write it, with the default nodeRole
    raw["nodeClasses"][0]["spec"]["role"] = "KarpenterNodeRole-demo"
    # When the file is read; Then the error says what to write either way, before anything is deployed
    with pytest.raises(ConfigError) as exc:
        parse_cluster_config(raw, source="clusters/demo.yaml")
    message = str(exc.value)
    assert "EC2NodeClass default: spec.role: 'KarpenterNodeRole-demo'" in message
    assert "write role: eks-autoscaler-node-demo" in message
    assert "nodeRole: {create: false, roleName: KarpenterNodeRole-demo}" in message


def test_karpenters_role_is_reused_by_name(raw: dict[str, Any]) -> None:
    # Given the same EC2NodeClass and nodeRole pointing at Karpenter's existing role by name
    raw["nodeClasses"][0]["spec"]["role"] = "KarpenterNodeRole-demo"
    raw["nodeRole"] = {"create": False, "roleName": "KarpenterNodeRole-demo", "createAccessEntry": False}
    # When read; Then it is accepted and the role is the one the EC2NodeClass names
    config = parse_cluster_config(raw, source="clusters/demo.yaml")
    assert config.node_role_name == "KarpenterNodeRole-demo" and not config.node_role.create


@pytest.mark.parametrize(("node_role", "message"), [
    ({"create": False}, "create: false needs roleArn or roleName of an existing node role"),
    ({"create": False, "roleName": "a", "roleArn": "arn:aws:iam::123456789012:role/a"},
     "give roleArn or roleName of the existing node role, not both"),
])
def test_node_role_mistakes(raw: dict[str, Any], node_role: dict[str, Any], message: str) -> None:
    raw["nodeRole"] = node_role
    with pytest.raises(ConfigError, match=message):
        parse_cluster_config(raw, source="clusters/demo.yaml")


def test_adoption_is_off_unless_asked(raw: dict[str, Any]) -> None:
    # Given the example file (no migration section) and one that asks for adoption
    on = copy.deepcopy(raw)
    on["migration"] = {"adoptKarpenterNodes": True}
    # Then adoption is off by default, on when asked, and a misspelt key is an error
    assert parse_cluster_config(raw, source="a").migration.adopt_karpenter_nodes is False
    assert parse_cluster_config(on, source="b").migration.adopt_karpenter_nodes is True
    on["migration"] = {"adoptKarpenterNode": True}
    misspelt = r"migration\.adoptKarpenterNode: unknown key 'adoptKarpenterNode'; did you mean 'adoptKarpenterNodes'\?"
    with pytest.raises(ConfigError, match=misspelt):
        parse_cluster_config(on, source="c")
