"""cdk-nag ``AwsSolutionsChecks`` suppressions, each with the reason the finding is accepted.

Wildcard resources are suppressed one by one (``appliesTo``), never per rule: a new wildcard anywhere
in a policy is a new finding.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from cdk_nag import NagPackSuppression, NagSuppressions

from infra.identity import CREATED_RESOURCE_TYPES, NODE_MANAGED_POLICIES, REFERENCED_RESOURCE_TYPES

STAR = "Resource::*"
STAR_REASON = ("Only for calls with no resource-level permissions (ec2:Describe*, pricing:GetProducts, "
               "X-Ray PutTraceSegments/PutTelemetryRecords, Lambda VPC network interfaces); scoped by "
               "aws:RequestedRegion where the API allows.")


def _ec2(stack: cdk.Stack, resource: str, *, account: bool = True) -> str:
    # cdk-nag spells unresolved intrinsics as <AWS::...>; a configured account appears literally.
    account_id = ("<AWS::AccountId>" if cdk.Token.is_unresolved(stack.account) else stack.account) if account else ""
    return f"Resource::arn:<AWS::Partition>:ec2:{stack.region}:{account_id}:{resource}/*"


def _suppress(stack: cdk.Stack, path: str, rule: str, reason: str,
              applies_to: list[str | dict[str, str]] | None = None) -> None:
    kwargs: dict[str, Any] = {"id": rule, "reason": reason}
    if applies_to is not None:
        kwargs["applies_to"] = applies_to
    NagSuppressions.add_resource_suppressions_by_path(stack, f"/{stack.stack_name}/{path}",
                                                      [NagPackSuppression(**kwargs)])


def apply_suppressions(stack: cdk.Stack, *, node_role_created: bool) -> None:
    region = stack.region
    _suppress(stack, "NodeClaims/Table/Resource", "AwsSolutions-DDB3",
              "Node claims live for minutes (written before a launch, deleted once the node registers); the "
              "instances carry their own claim tags, from which a lost table is rebuilt by the next pass. "
              "A point-in-time backup would restore only stale launches.")
    NagSuppressions.add_resource_suppressions(
        [function for name in ("Provisioner", "Interruption", "Disruption", "Watcher")
         if (function := stack.node.find_child("Functions").node.try_find_child(name)) is not None],
        [NagPackSuppression(id="AwsSolutions-L1",
                            reason="Pinned to Python 3.13, whose bytecode the asset ships (infra/bundling.py), "
                                   "supported until 2029; moving to a newer runtime is a tested change.")],
    )
    if node_role_created:
        _suppress(stack, "Identity/NodeRole/Resource", "AwsSolutions-IAM4",
                  "EKS worker nodes need exactly these AWS-maintained policies (kubelet, VPC CNI, image pulls, "
                  "SSM access); AWS keeps them current with EKS.",
                  [f"Policy::arn:<AWS::Partition>:iam::aws:policy/{name}" for name in NODE_MANAGED_POLICIES])
    created = [_ec2(stack, t) for t in CREATED_RESOURCE_TYPES]
    _suppress(stack, "Identity/ProvisionerRole/DefaultPolicy/Resource", "AwsSolutions-IAM5",
              f"{STAR_REASON} EC2 resource ids are not known before launch: creation is allowed only with "
              "the cluster's tags in the request (aws:RequestTag), launch templates and termination only for resources "
              "carrying them (aws:ResourceTag); images, snapshots, subnets, security groups and capacity "
              "reservations are chosen by the EC2NodeClass selectors at run time; public AMI parameters live "
              "under /aws/service/; instance profiles the autoscaler creates are named <cluster>_<hash>.",
              [STAR, {"regex": "/^Resource::arn:<AWS::Partition>:iam::.+:instance-profile\\/.+_\\*$/g"},
               _ec2(stack, "image", account=False), _ec2(stack, "snapshot", account=False),
               *(_ec2(stack, t) for t in REFERENCED_RESOURCE_TYPES), *created,
               f"Resource::arn:<AWS::Partition>:ssm:{region}::parameter/aws/service/*"])
    account_id = "<AWS::AccountId>" if cdk.Token.is_unresolved(stack.account) else stack.account
    groups = (f"Resource::arn:<AWS::Partition>:autoscaling:{stack.region}:{account_id}:autoScalingGroup:*:"
              "autoScalingGroupName/*")
    for role in ("InterruptionRole", "DisruptionRole"):
        # Drift compares a node's AMI with what the EC2NodeClass resolves to now: public AMI parameters.
        extra = [groups] if role == "InterruptionRole" else [
            f"Resource::arn:<AWS::Partition>:ssm:{region}::parameter/aws/service/*"]
        _suppress(stack, f"Identity/{role}/DefaultPolicy/Resource", "AwsSolutions-IAM5",
                  f"{STAR_REASON} Instances are terminated only when tagged for this cluster (aws:ResourceTag). "
                  "Lifecycle actions may be completed on any Auto Scaling group with a terminate hook (managed node "
                  "groups are unknown at deploy time); completing one only ends the hook's wait. Drift detection "
                  "reads the public AMI parameters under /aws/service/.",
                  [STAR, _ec2(stack, "instance"), *extra])
    for child in stack.node.children:
        if child.node.id.startswith("SchedulerRoleForTarget"):
            NagSuppressions.add_resource_suppressions(child, [NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="EventBridge Scheduler's role may invoke only its one function (the ':*' covers that "
                       "function's versions and aliases).",
                applies_to=[{"regex": "/^Resource::<Functions.*\\.Arn>:\\*$/g"}])], apply_to_children=True)
