"""The stack for a cluster taken over from Karpenter (tests/infra/clusters/migration.yaml): Karpenter's node
role reused by name (no role of the same name created, so no collision), the instance profile created by
the stack (``cdk destroy`` removes it) and handed to the functions, and termination of adopted Karpenter
instances allowed only to the functions that disrupt and handle interruptions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match

from tests.infra.conftest import Synth, _synth, render

MIGRATION = Path(__file__).parent / "clusters" / "migration.yaml"
ROLE_ARN = "arn:${AWS::Partition}:iam::123456789012:role/KarpenterNodeRole-mig"
INSTANCE = "arn:${AWS::Partition}:ec2:eu-central-1:123456789012:instance/*"


@pytest.fixture(scope="module")
def migration() -> Synth:
    return _synth(configFile=str(MIGRATION))


def _statements(synth: Synth, role_prefix: str) -> list[dict[str, Any]]:
    return [s for p in synth.of_type("AWS::IAM::Policy").values()
            if any(r.strip("${}").startswith(role_prefix) for r in render(p["Properties"]["Roles"]))
            for s in p["Properties"]["PolicyDocument"]["Statement"]]


def test_karpenters_node_role_is_reused_by_name_not_created(migration: Synth) -> None:
    # Given nodeRole: {create: false, roleName: KarpenterNodeRole-mig}
    # Then no node role is created (nothing can collide with the role Karpenter's stack made) ...
    assert not [k for k in migration.of_type("AWS::IAM::Role") if k.startswith("IdentityNodeRole")]
    assert not [e for e in migration.of_type("AWS::EKS::AccessEntry").values()
                if e["Properties"]["Type"] == "EC2_LINUX"]
    # ... the functions may pass exactly that role, and the stack creates the instance profile for it
    [pass_role] = [s for s in _statements(migration, "IdentityProvisionerRole") if s.get("Sid") == "PassNodeRole"]
    assert render(pass_role["Resource"]) == ROLE_ARN
    migration.template.has_resource_properties("AWS::IAM::InstanceProfile", {"Roles": ["KarpenterNodeRole-mig"]})
    [(profile_id, _)] = migration.of_type("AWS::IAM::InstanceProfile").items()
    migration.template.has_resource_properties("AWS::Lambda::Function", {"Environment": {"Variables": Match.object_like(
        {"AUTOSCALER_INSTANCE_PROFILE": {"Ref": profile_id}})}})


def test_no_function_creates_instance_profiles_at_run_time(migration: Synth, demo: Synth) -> None:
    for synth in (migration, demo):
        actions = {a for p in synth.of_type("AWS::IAM::Policy").values()
                   for s in p["Properties"]["PolicyDocument"]["Statement"]
                   for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
        assert not {a for a in actions if "InstanceProfile" in a}


def test_adopted_karpenter_instances_may_be_terminated_by_disruption_and_interruption_only(
        migration: Synth, demo: Synth) -> None:
    def adopted(synth: Synth, role: str) -> dict[str, Any]:
        return {s["Sid"]: render(s["Condition"]) for s in _statements(synth, role)
                if str(s.get("Sid", "")).startswith("TerminateAdopted")}

    expected = {
        "TerminateAdoptedProvisionerInstances": {
            "StringEquals": {"aws:ResourceTag/kubernetes.io/cluster/mig": "owned"},
            "StringLike": {"aws:ResourceTag/karpenter.sh/provisioner-name": "*"}},
        "TerminateAdoptedNodePoolInstancesByEksTag": {
            "StringEquals": {"aws:ResourceTag/eks:eks-cluster-name": "mig"},
            "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
        "TerminateAdoptedProvisionerInstancesByEksTag": {
            "StringEquals": {"aws:ResourceTag/eks:eks-cluster-name": "mig"},
            "StringLike": {"aws:ResourceTag/karpenter.sh/provisioner-name": "*"}},
    }
    assert adopted(migration, "IdentityDisruptionRole") == expected
    assert adopted(migration, "IdentityInterruptionRole") == expected
    assert adopted(migration, "IdentityProvisionerRole") == {}
    assert adopted(demo, "IdentityDisruptionRole") == {}  # adoption is opt-in
    for s in _statements(migration, "IdentityDisruptionRole"):
        if str(s.get("Sid", "")).startswith("TerminateAdopted"):
            assert s["Action"] == "ec2:TerminateInstances" and render(s["Resource"]) == INSTANCE


def test_bootstrap_goes_to_the_cluster_files_region(migration: Synth, demo: Synth) -> None:
    # `make bootstrap CLUSTER=x` runs `cdk bootstrap -c cluster=x`: with no environment given, the CDK CLI
    # bootstraps the app's stack environments, with unknown-account taken from the credentials.
    assert migration.stack.environment == "aws://123456789012/eu-central-1"
    assert demo.stack.environment == "aws://unknown-account/us-west-2"
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "npx --no-install cdk bootstrap -c cluster=$(CLUSTER) -c skipBundling=true" in makefile
