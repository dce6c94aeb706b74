"""docs/migration.md's cluster-file commands, run as written: each block marked ``<!-- tested: ...::NAME -->``
is executed by bash with ``kubectl`` answering what a real cluster of that Karpenter version prints
(``kubectl get ... -o yaml``: a List with status and server-set metadata) and ``make`` recorded, not run;
the cluster file it writes must then pass the same validation as ``make synth``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config import ClusterConfig, ConfigError, load_cluster_config, parse_cluster_config
from autoscaler.domain.nodeclass import parse_node_classes
from autoscaler.domain.nodepool import parse_node_pools

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "migration.md"
SERVER_META = {"creationTimestamp": "2024-08-21T10:00:00Z", "generation": 1, "resourceVersion": "4242",
               "uid": "5d6b0c1e-0000-4000-8000-000000000000"}

# Karpenter v1 objects as `kubectl get nodepools,ec2nodeclasses -o yaml` prints them (defaults filled in).
V1_OBJECTS = [
    {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
     "metadata": {"name": "default", "annotations": {"karpenter.sh/nodepool-hash": "12393960163388511505",
                                                     "karpenter.sh/nodepool-hash-version": "v3"}, **SERVER_META},
     "spec": {"disruption": {"budgets": [{"nodes": "10%"}], "consolidateAfter": "1m",
                             "consolidationPolicy": "WhenEmptyOrUnderutilized"},
              "limits": {"cpu": 1000},
              "template": {"spec": {
                  "expireAfter": "720h",
                  "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                  "requirements": [
                      {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                      {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                      {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                      {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                      {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]}]}}},
     "status": {"conditions": [{"type": "Ready", "status": "True"}], "resources": {"cpu": "8", "nodes": "2"}}},
    {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
     "metadata": {"name": "default", "finalizers": ["karpenter.k8s.aws/termination"],
                  "annotations": {"karpenter.k8s.aws/ec2nodeclass-hash": "6015526117271389337"}, **SERVER_META},
     "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}],
              "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                                  "httpPutResponseHopLimit": 1, "httpTokens": "required"},
              "role": "KarpenterNodeRole-my-cluster",
              "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
              "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}]},
     "status": {"instanceProfile": "my-cluster_2962055935735463423", "amis": []}},
]
# Karpenter v0.2x getting-started objects as `kubectl get provisioners,awsnodetemplates -o yaml` prints them.
V0_2X_OBJECTS = [
    {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default", **SERVER_META},
     "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
              "limits": {"resources": {"cpu": "1000"}}, "providerRef": {"name": "default"},
              "ttlSecondsAfterEmpty": 30},
     "status": {"resources": {"cpu": "4"}}},
    {"apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate",
     "metadata": {"name": "default", **SERVER_META},
     "spec": {"subnetSelector": {"karpenter.sh/discovery": "my-cluster"},
              "securityGroupSelector": {"karpenter.sh/discovery": "my-cluster"}},
     "status": {"subnets": [{"id": "subnet-0123456789abcdef0", "zone": "eu-west-1a"}]}},
]


def _block(name: str) -> str:
    """The shell block that follows the ``tested: ...::name`` marker, dedented."""
    text = GUIDE.read_text()
    marker = text.index(f"tests/domain/test_migration_guide.py::{name} -->")
    found = re.search(r"```sh\n(.*?)\n\s*```", text[marker:], re.S)
    assert found, f"no sh block after the {name} marker"
    return textwrap.dedent(found.group(1))


def _run(block: str, tmp_path: Path, objects: list[dict[str, Any]]) -> tuple[ClusterConfig, list[str]]:
    # Given a working directory like the repository's, kubectl answering as the cluster would, make recorded
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "demo.yaml").write_text((ROOT / "clusters" / "demo.yaml").read_text())
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "listing.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects,
                                                           "metadata": {"resourceVersion": ""}}))
    (bin_dir / "kubectl").write_text(f"#!/bin/sh\ncat {tmp_path / 'listing.yaml'}\n")
    (bin_dir / "make").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'make.log'}\n")
    for tool in ("kubectl", "make"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CLUSTER": "my-cluster", "REGION": "eu-west-1",
           "ACCOUNT": "123456789012"}
    # When the guide's block runs
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    # Then the file it wrote passes validation (what make synth checks first)
    config = load_cluster_config(tmp_path / "clusters" / "my-cluster.yaml")
    return config, (tmp_path / "make.log").read_text().splitlines()


def test_karpenter_v1_guide(tmp_path: Path) -> None:
    config, make = _run(_block("test_karpenter_v1_guide"), tmp_path, V1_OBJECTS)
    assert make == ["synth CLUSTER=my-cluster"]
    assert (config.cluster_name, config.region, config.account) == ("my-cluster", "eu-west-1", "123456789012")
    assert config.migration.adopt_karpenter_nodes
    assert config.node_role_name == "KarpenterNodeRole-my-cluster" and not config.node_role.create
    [pool] = parse_node_pools(config.node_pools)
    classes = parse_node_classes(config.node_classes, default_role=config.node_role_name)
    assert pool.name == "default" and classes["default"].role == "KarpenterNodeRole-my-cluster"
    assert "status" not in config.node_pools[0] and set(config.node_pools[0]["metadata"]) == {"name"}


def test_karpenter_v0_2x_guide(tmp_path: Path) -> None:
    config, make = _run(_block("test_karpenter_v0_2x_guide"), tmp_path, V0_2X_OBJECTS)
    assert make == ["synth CLUSTER=my-cluster"]
    assert config.migration.adopt_karpenter_nodes
    assert config.node_role.instance_profile_name == "KarpenterNodeInstanceProfile-my-cluster"
    [pool] = parse_node_pools(config.node_pools)
    classes = parse_node_classes(config.node_classes, default_role=config.node_role_name)
    # The Provisioner is the NodePool of the same name (its nodes' provisioner-name label maps to it), and the
    # AWSNodeTemplate without instanceProfile takes the node role (launches use the stack's profile).
    assert pool.name == "default" and classes["default"].role == "KarpenterNodeRole-my-cluster"
    assert classes["default"].instance_profile is None


def test_cluster_autoscaler_guide(tmp_path: Path) -> None:
    config, make = _run(_block("test_cluster_autoscaler_guide"), tmp_path, [])
    assert make == ["synth CLUSTER=my-cluster"]
    assert (config.cluster_name, config.region) == ("my-cluster", "eu-west-1")
    assert config.node_role_name == "eks-autoscaler-node-my-cluster" and config.node_role.create
    assert config.node_classes[0]["spec"]["subnetSelectorTerms"] == [
        {"tags": {"karpenter.sh/discovery": "my-cluster"}}]
    assert not config.migration.adopt_karpenter_nodes


def test_the_error_the_guide_quotes_is_the_one_validation_gives() -> None:
    # Given the demo file for my-cluster whose EC2NodeClass still names Karpenter's role
    raw = yaml.safe_load((ROOT / "clusters" / "demo.yaml").read_text())
    raw["clusterName"] = "my-cluster"
    raw["nodeClasses"][0]["spec"]["role"] = "KarpenterNodeRole-my-cluster"
    with pytest.raises(ConfigError) as exc:
        parse_cluster_config(raw, source="clusters/my-cluster.yaml")
    # Then the guide quotes that message word for word
    [problem] = exc.value.problems
    quoted = GUIDE.read_text().split("```\nEC2NodeClass default: spec.role:", 1)[1].split("```", 1)[0]
    assert " ".join(f"EC2NodeClass default: spec.role:{quoted}".split()) == " ".join(problem.split())
