"""Every IAM statement of every role the stack creates, the access entries and the shipped RBAC manifest."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from infra.identity import KUBERNETES_GROUP, RBAC_MANIFEST, WATCHER_GROUP, WATCHER_RBAC_MANIFEST
from tests.infra.conftest import Synth, as_list, render

EC2 = "arn:${AWS::Partition}:ec2:us-west-2:${AWS::AccountId}:"
CREATED = [f"{EC2}{t}/*" for t in ("fleet", "instance", "launch-template", "network-interface",
                                   "spot-instances-request", "volume")]
OWNED = {"StringEquals": {"aws:ResourceTag/kubernetes.io/cluster/demo": "owned"},
         "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}
REGION = {"StringEquals": {"aws:RequestedRegion": "us-west-2"}}
CLUSTER = "arn:${AWS::Partition}:eks:us-west-2:${AWS::AccountId}:cluster/demo"
XRAY = {"Action": ["xray:PutTelemetryRecords", "xray:PutTraceSegments"], "Resource": ["*"]}


def _logs(name: str) -> dict[str, Any]:
    return {"Sid": "WriteOwnLogs", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [f"${{Functions{name}Logs.Arn}}"]}


TERMINATE = {"Sid": "TerminateOwnInstances", "Action": ["ec2:TerminateInstances"], "Resource": [f"{EC2}instance/*"],
             "Condition": OWNED}
DESCRIBE_CLUSTER = {"Sid": "DescribeCluster", "Action": ["eks:DescribeCluster"], "Resource": [CLUSTER]}
PRICES = {"Sid": "ReadPrices", "Action": ["pricing:GetProducts"], "Resource": ["*"]}
INVOKE = {"Sid": "InvokeProvisioner", "Action": ["lambda:InvokeFunction"], "Resource": ["${FunctionsProvisioner.Arn}"]}

EXPECTED: dict[str, list[dict[str, Any]]] = {
    "IdentityProvisionerRole": [
        {"Sid": "DescribeEc2", "Resource": ["*"], "Condition": REGION, "Action": [
            "ec2:DescribeAvailabilityZones", "ec2:DescribeCapacityReservations", "ec2:DescribeImages",
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeInstanceTypes", "ec2:DescribeInstances", "ec2:DescribeLaunchTemplates",
            "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"]},
        PRICES, DESCRIBE_CLUSTER,
        {"Sid": "LaunchFromReferencedResources", "Action": ["ec2:CreateFleet", "ec2:RunInstances"], "Resource": [
            f"{EC2}capacity-reservation/*", f"{EC2}security-group/*", f"{EC2}subnet/*",
            "arn:${AWS::Partition}:ec2:us-west-2::image/*", "arn:${AWS::Partition}:ec2:us-west-2::snapshot/*"]},
        {"Sid": "LaunchTaggedForCluster", "Action": ["ec2:CreateFleet", "ec2:CreateLaunchTemplate", "ec2:RunInstances"],
         "Resource": CREATED, "Condition": {
             "StringEquals": {"aws:RequestTag/kubernetes.io/cluster/demo": "owned",
                              "aws:RequestTag/eks:eks-cluster-name": "demo"},
             "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
        {"Sid": "LaunchFromOwnLaunchTemplates", "Action": ["ec2:CreateFleet", "ec2:RunInstances"],
         "Resource": [f"{EC2}launch-template/*"], "Condition": OWNED},
        {"Sid": "TagOnlyOnCreate", "Action": ["ec2:CreateTags"], "Resource": CREATED, "Condition": {"StringEquals": {
            "ec2:CreateAction": ["CreateFleet", "CreateLaunchTemplate", "RunInstances"],
            "aws:RequestTag/kubernetes.io/cluster/demo": "owned"}}},
        TERMINATE,
        # The node claims (written before every CreateFleet): this cluster's items of its own table only.
        {"Sid": "RecordNodeClaims", "Resource": ["${NodeClaimsTable.Arn}"],
         "Action": ["dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:Query"],
         "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["demo", "demo#*"]}}},
        {"Sid": "DeleteOwnLaunchTemplates", "Action": ["ec2:DeleteLaunchTemplate"],
         "Resource": [f"{EC2}launch-template/*"], "Condition": OWNED},
        {"Sid": "PassNodeRole", "Action": ["iam:PassRole"], "Resource": ["${IdentityNodeRole.Arn}"],
         "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
        # No iam:*InstanceProfile: launches use the profile the stack creates (tests/infra/test_migration.py).
        {"Sid": "ReadPublicAmiParameters", "Action": ["ssm:GetParameter"],
         "Resource": ["arn:${AWS::Partition}:ssm:us-west-2::parameter/aws/service/*"]},
        _logs("Provisioner"),
    ],
    "IdentityInterruptionRole": [
        {"Sid": "DescribeEc2", "Action": ["ec2:DescribeInstances"], "Resource": ["*"], "Condition": REGION},
        DESCRIBE_CLUSTER, TERMINATE, INVOKE, _logs("Interruption"), XRAY,
        {"Sid": "CompleteLifecycleActions",
         "Resource": ["arn:${AWS::Partition}:autoscaling:us-west-2:${AWS::AccountId}:autoScalingGroup:*:"
                      "autoScalingGroupName/*"],
         "Action": ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"]},
        {"Action": ["sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
                    "sqs:ReceiveMessage"], "Resource": ["${InterruptionQueue.Arn}"]},
    ],
    "IdentityDisruptionRole": [
        # Drift resolves the EC2NodeClasses' AMI, subnet and security-group selectors; Capacity Block ends.
        {"Sid": "DescribeEc2", "Resource": ["*"], "Condition": REGION, "Action": [
            "ec2:DescribeAvailabilityZones", "ec2:DescribeCapacityReservations", "ec2:DescribeImages",
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeInstanceTypes", "ec2:DescribeInstances", "ec2:DescribeSecurityGroups",
            "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"]},
        PRICES, DESCRIBE_CLUSTER, TERMINATE, INVOKE, _logs("Disruption"),
        {"Sid": "ReadPublicAmiParameters", "Action": ["ssm:GetParameter"],
         "Resource": ["arn:${AWS::Partition}:ssm:us-west-2::parameter/aws/service/*"]},
    ],
    # The watcher: the cluster's endpoint, and invoking the provisioner; no X-Ray (tracing off).
    "IdentityWatcherRole": [DESCRIBE_CLUSTER, INVOKE, _logs("Watcher")],
    "SchedulerRoleForTargete7ef0c": [
        {"Action": ["lambda:InvokeFunction"],
         "Resource": ["${FunctionsProvisioner.Arn}", "${FunctionsProvisioner.Arn}:*"]}],
    "SchedulerRoleForTarget7a4431": [
        {"Action": ["lambda:InvokeFunction"], "Resource": ["${FunctionsWatcher.Arn}", "${FunctionsWatcher.Arn}:*"]}],
    "SchedulerRoleForTargetb7cac6": [
        {"Action": ["lambda:InvokeFunction"],
         "Resource": ["${FunctionsDisruption.Arn}", "${FunctionsDisruption.Arn}:*"]}],
}

# The only (action, reason) pairs allowed a "*" resource: APIs without resource-level permissions.
STAR_RESOURCE_ACTIONS = {
    "ec2:DescribeAvailabilityZones", "ec2:DescribeCapacityReservations", "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes", "ec2:DescribeInstances",
    "ec2:DescribeLaunchTemplates", "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets",  # EC2 Describe* has no resource-level permissions
    "pricing:GetProducts",  # the Price List API has no resource types
    "xray:PutTelemetryRecords", "xray:PutTraceSegments",  # X-Ray segments have no ARN
    # Lambda's VPC network interfaces (only with `vpc:` configured), as AWSLambdaVPCAccessExecutionRole grants
    "ec2:AssignPrivateIpAddresses", "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface",
    "ec2:DescribeNetworkInterfaces", "ec2:UnassignPrivateIpAddresses",
}


def _normal(statement: dict[str, Any]) -> str:
    out = {"Sid": statement.get("Sid"), "Action": sorted(as_list(statement["Action"])),
           "Resource": sorted(as_list(render(statement["Resource"]))), "Condition": render(statement.get("Condition"))}
    return json.dumps(out, sort_keys=True)


def _policies_by_role(synth: Synth) -> dict[str, list[dict[str, Any]]]:
    roles: dict[str, list[dict[str, Any]]] = {}
    for policy in synth.of_type("AWS::IAM::Policy").values():
        for role in render(policy["Properties"]["Roles"]):
            roles.setdefault(role.strip("${}"), []).extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return roles


def test_every_role_has_exactly_the_expected_statements(demo: Synth) -> None:
    actual = _policies_by_role(demo)
    assert set(actual) == set(EXPECTED)
    for role, statements in EXPECTED.items():
        assert all(s.get("Effect") == "Allow" for s in actual[role])
        assert sorted(_normal(s) for s in actual[role]) == sorted(_normal(s) for s in statements), role


@pytest.mark.parametrize("synth_name", ["demo", "full"])
def test_no_wildcard_actions_and_star_resources_only_where_the_api_needs_them(
        synth_name: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(synth_name)
    for policy in synth.of_type("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = as_list(statement["Action"])
            assert not any("*" in a for a in actions), statement
            if "*" in as_list(statement["Resource"]):
                assert set(actions) <= STAR_RESOURCE_ACTIONS, statement


def test_function_roles_trust_only_lambda_and_node_role_only_ec2(demo: Synth) -> None:
    for name, role in demo.of_type("AWS::IAM::Role").items():
        principal = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"]
        if name.startswith("IdentityNodeRole"):
            assert principal == "ec2.amazonaws.com"
            assert role["Properties"]["RoleName"] == "eks-autoscaler-node-demo"
        elif name.startswith("Identity"):
            assert principal == "lambda.amazonaws.com"
        else:
            assert principal == "scheduler.amazonaws.com"


def test_vpc_functions_may_manage_their_network_interfaces(full: Synth) -> None:
    statements = [s for p in full.of_type("AWS::IAM::Policy").values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == "ManageVpcInterfaces"]
    assert len(statements) == 3
    assert all(s["Condition"] == {"StringEquals": {"aws:RequestedRegion": "eu-west-1"}} for s in statements)


def test_access_entries_for_nodes_the_three_function_roles_and_the_watcher(demo: Synth) -> None:
    entries = {k: render(v["Properties"]) for k, v in demo.of_type("AWS::EKS::AccessEntry").items()}
    assert sorted(entries.values(), key=lambda e: e["PrincipalArn"]) == [
        {"ClusterName": "demo", "KubernetesGroups": [KUBERNETES_GROUP],
         "PrincipalArn": f"${{Identity{n}Role.Arn}}", "Type": "STANDARD"} for n in ("Disruption", "Interruption")
    ] + [{"ClusterName": "demo", "PrincipalArn": "${IdentityNodeRole.Arn}", "Type": "EC2_LINUX"},
         {"ClusterName": "demo", "KubernetesGroups": [KUBERNETES_GROUP],
          "PrincipalArn": "${IdentityProvisionerRole.Arn}", "Type": "STANDARD"},
         # The watcher is in its own group, which may only list and watch pods and nodes.
         {"ClusterName": "demo", "KubernetesGroups": [WATCHER_GROUP],
          "PrincipalArn": "${IdentityWatcherRole.Arn}", "Type": "STANDARD"}]


def test_watcher_rbac_manifest_grants_only_list_and_watch_of_pods_and_nodes() -> None:
    role, binding = list(yaml.safe_load_all(WATCHER_RBAC_MANIFEST.read_text()))
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list", "watch"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": WATCHER_GROUP}]


def test_cluster_admin_is_opt_in_and_an_existing_node_role_gets_no_entry(full: Synth) -> None:
    entries = [v["Properties"] for v in full.of_type("AWS::EKS::AccessEntry").values()]
    assert len(entries) == 3 and all(e["Type"] == "STANDARD" for e in entries)
    for entry in entries:
        assert entry["AccessPolicies"] == [{
            "PolicyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
            "AccessScope": {"Type": "cluster"}}]
    # The brought role and instance profile are referenced, not created.
    assert not [k for k in full.of_type("AWS::IAM::Role") if k.startswith("IdentityNodeRole")]
    assert not full.of_type("AWS::IAM::InstanceProfile")
    _, provisioner = full.one("AWS::Lambda::Function", "FunctionsProvisioner")
    env = provisioner["Properties"]["Environment"]["Variables"]
    assert env["AUTOSCALER_INSTANCE_PROFILE"] == "KarpenterNodeInstanceProfile-prod-blue"
    assert env["AUTOSCALER_NODE_ROLE_ARN"] == "arn:aws:iam::123456789012:role/KarpenterNodeRole-prod-blue"


def test_demo_has_no_cluster_admin(demo: Synth) -> None:
    assert all("AccessPolicies" not in v["Properties"] for v in demo.of_type("AWS::EKS::AccessEntry").values())


def test_rbac_manifest_binds_the_functions_group_to_its_role() -> None:
    # Which verbs the role grants is checked against real traffic in tests/adapters/test_rbac_exact.py.
    role, binding = list(yaml.safe_load_all(RBAC_MANIFEST.read_text()))
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert ("", "pods/binding") not in granted
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": KUBERNETES_GROUP}]


def test_stack_prints_the_one_rbac_command(demo: Synth) -> None:
    command = demo.template.to_json()["Outputs"]["ApplyRbacCommand"]["Value"]
    assert command == ("aws eks update-kubeconfig --region us-west-2 --name demo && "
                       "kubectl apply -f infra/rbac/autoscaler-clusterrole.yaml "
                       "-f infra/rbac/watcher-clusterrole.yaml")
