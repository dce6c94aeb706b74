"""Identity: one IAM role per function holding only the calls that function makes, the node role and
instance profile (created or brought), and the EKS access entries that let nodes join and the functions
reach the Kubernetes API as members of one RBAC group.

The Kubernetes permissions themselves are the ClusterRole in ``infra/rbac/autoscaler-clusterrole.yaml``,
bound to :data:`KUBERNETES_GROUP`; cluster-admin is an explicit opt-in (``rbac.clusterAdmin``).
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from autoscaler.config import ClusterConfig
from autoscaler.domain.keys import (
    EKS_CLUSTER_TAG,
    NODEPOOL_TAG,
    PROVISIONER_NAME_TAG,
)
from autoscaler.domain.ownership import cluster_tag

KUBERNETES_GROUP = "eks-serverless-autoscaler"
RBAC_MANIFEST = Path(__file__).resolve().parent / "rbac" / "autoscaler-clusterrole.yaml"
# The watcher only lists and watches pods and nodes: its own group and ClusterRole.
WATCHER_GROUP = "eks-serverless-autoscaler-watcher"
WATCHER_RBAC_MANIFEST = RBAC_MANIFEST.with_name("watcher-clusterrole.yaml")
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
# With rbac.clusterAdmin (no RBAC manifest applied) the watcher gets read-only access instead.
VIEW_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"

# Tags on every instance and launch template the autoscaler creates (DESIGN.md "Resource tags"); the
# policies below key on them, so an instance without them can be neither launched nor terminated.
# The tag names themselves live once, in autoscaler.domain.fleet.


# EC2 read calls; Describe* APIs support no resource-level permissions, so their resource is "*".
PROVISIONER_DESCRIBE = (
    "ec2:DescribeAvailabilityZones", "ec2:DescribeCapacityReservations", "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes", "ec2:DescribeInstances", "ec2:DescribeLaunchTemplates",
    "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets",
)
# Drift resolves each EC2NodeClass's AMI, subnet and security-group selectors (DescribeImages,
# DescribeSubnets, DescribeSecurityGroups, and the public AMI alias parameters); a Capacity Block's
# end is read with DescribeCapacityReservations.
DISRUPTION_DESCRIBE = (
    "ec2:DescribeAvailabilityZones", "ec2:DescribeCapacityReservations", "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes", "ec2:DescribeInstances", "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets",
)
INTERRUPTION_DESCRIBE = ("ec2:DescribeInstances",)
# Resources a launch creates: each must carry the cluster's tags in the request.
CREATED_RESOURCE_TYPES = ("fleet", "instance", "volume", "network-interface", "launch-template",
                          "spot-instances-request")
# Existing resources a launch references.
REFERENCED_RESOURCE_TYPES = ("subnet", "security-group", "capacity-reservation")
NODE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                         "AmazonEC2ContainerRegistryReadOnly", "AmazonSSMManagedInstanceCore")


class Identity(Construct):
    """Roles for the three (with the watcher: four) functions and the nodes, plus access entries.

    The per-function grants that need a function or log group (logs, invoke) are added by
    :meth:`allow_invoke_provisioner` and the functions construct once those exist.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: ClusterConfig) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.stack = cdk.Stack.of(self)
        self.cluster_arn = self.stack.format_arn(service="eks", resource="cluster",
                                                 resource_name=config.cluster_name)
        self.node_role = self._node_role()
        self.instance_profile = self._instance_profile()
        self.provisioner_role = self._function_role("Provisioner")
        self.interruption_role = self._function_role("Interruption")
        self.disruption_role = self._function_role("Disruption")
        # The watcher exists only with ``provisioner.reaction: watcher``; it calls eks:DescribeCluster and
        # invokes the provisioner (granted in allow_invoke_provisioner), nothing else.
        self.watcher_role = self._function_role("Watcher") if config.provisioner.mode == "watcher" else None
        if self.watcher_role is not None:
            self.watcher_role.add_to_policy(self._describe_cluster())
        self._grant_provisioner()
        self._grant_interruption()
        self._grant_disruption()
        self._access_entries()

    # --- roles -----------------------------------------------------------------------------------

    def _node_role(self) -> iam.IRole:
        if self.config.node_role.role_arn:
            return iam.Role.from_role_arn(self, "NodeRole", self.config.node_role.role_arn, mutable=False)
        if not self.config.node_role.create:
            # An existing role named in the cluster file (e.g. Karpenter's KarpenterNodeRole-<cluster>).
            return iam.Role.from_role_name(self, "NodeRole", self.config.node_role_name, mutable=False)
        return iam.Role(
            self, "NodeRole",
            role_name=self.config.node_role_name,
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"Nodes launched by the serverless autoscaler for EKS cluster {self.config.cluster_name}",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(n) for n in NODE_MANAGED_POLICIES],
        )

    def _instance_profile(self) -> iam.IInstanceProfile:
        """The profile every launch uses (passed to the functions as AUTOSCALER_INSTANCE_PROFILE): an
        existing one by name, or one the stack creates for the node role, so ``cdk destroy`` removes it
        and the functions need no iam:CreateInstanceProfile."""
        name = self.config.node_role.instance_profile_name
        if name and not self.config.node_role.create:
            return iam.InstanceProfile.from_instance_profile_name(self, "InstanceProfile", name)
        return iam.InstanceProfile(self, "InstanceProfile", role=self.node_role, instance_profile_name=name)

    def _function_role(self, name: str) -> iam.Role:
        return iam.Role(self, f"{name}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description=f"{name} function of the serverless autoscaler for {self.config.cluster_name}")

    # --- statements ------------------------------------------------------------------------------

    def _arn(self, resource: str, name: str = "*", *, account: bool = True) -> str:
        return self.stack.format_arn(service="ec2", resource=resource, resource_name=name,
                                     account=None if account else "")

    def _describe(self, actions: tuple[str, ...]) -> iam.PolicyStatement:
        return iam.PolicyStatement(sid="DescribeEc2", actions=list(actions), resources=["*"],
                                   conditions={"StringEquals": {"aws:RequestedRegion": self.stack.region}})

    def _pricing(self) -> iam.PolicyStatement:
        # The Price List API has no resource types, and its endpoint is in us-east-1 whatever our region.
        return iam.PolicyStatement(sid="ReadPrices", actions=["pricing:GetProducts"], resources=["*"])

    def _describe_cluster(self) -> iam.PolicyStatement:
        return iam.PolicyStatement(sid="DescribeCluster", actions=["eks:DescribeCluster"],
                                   resources=[self.cluster_arn])

    def _owned_conditions(self, key: str) -> dict[str, dict[str, str]]:
        cluster = self.config.cluster_name
        return {"StringEquals": {f"{key}/{cluster_tag(cluster)}": "owned"},
                "StringLike": {f"{key}/{NODEPOOL_TAG}": "*"}}

    def _terminate_own(self) -> iam.PolicyStatement:
        return iam.PolicyStatement(sid="TerminateOwnInstances", actions=["ec2:TerminateInstances"],
                                   resources=[self._arn("instance")],
                                   conditions=self._owned_conditions("aws:ResourceTag"))

    def _terminate(self) -> list[iam.PolicyStatement]:
        """Interruption and disruption: our instances, and adopted Karpenter ones with migration on (the
        provisioner terminates only its own orphans)."""
        own = self._terminate_own()
        if not self.config.migration.adopt_karpenter_nodes:
            return [own]
        # Adopted Karpenter instances (autoscaler.domain.ownership.launched_by_karpenter): the cluster tag or
        # eks:eks-cluster-name, with a NodePool or (v0.2x) Provisioner tag. Karpenter v1's instances already
        # match the statement above; these add the other combinations.
        cluster = self.config.cluster_name
        by_cluster = {"StringEquals": {f"aws:ResourceTag/{cluster_tag(cluster)}": "owned"}}
        by_eks = {"StringEquals": {f"aws:ResourceTag/{EKS_CLUSTER_TAG}": cluster}}
        combinations = (("TerminateAdoptedProvisionerInstances", by_cluster, PROVISIONER_NAME_TAG),
                        ("TerminateAdoptedNodePoolInstancesByEksTag", by_eks, NODEPOOL_TAG),
                        ("TerminateAdoptedProvisionerInstancesByEksTag", by_eks, PROVISIONER_NAME_TAG))
        return [own] + [iam.PolicyStatement(sid=sid, actions=["ec2:TerminateInstances"],
                                            resources=[self._arn("instance")],
                                            conditions={**match, "StringLike": {f"aws:ResourceTag/{pool_tag}": "*"}})
                        for sid, match, pool_tag in combinations]

    def _grant_provisioner(self) -> None:
        cluster = self.config.cluster_name
        created = [self._arn(t) for t in CREATED_RESOURCE_TYPES]
        request_tags = self._owned_conditions("aws:RequestTag")
        request_tags["StringEquals"][f"aws:RequestTag/{EKS_CLUSTER_TAG}"] = cluster
        statements = [
            self._describe(PROVISIONER_DESCRIBE),
            self._pricing(),
            self._describe_cluster(),
            iam.PolicyStatement(
                sid="LaunchFromReferencedResources", actions=["ec2:CreateFleet", "ec2:RunInstances"],
                resources=[self._arn("image", account=False), self._arn("snapshot", account=False),
                           *(self._arn(t) for t in REFERENCED_RESOURCE_TYPES)]),
            iam.PolicyStatement(
                sid="LaunchTaggedForCluster",
                actions=["ec2:CreateFleet", "ec2:CreateLaunchTemplate", "ec2:RunInstances"],
                resources=created, conditions=request_tags),
            iam.PolicyStatement(
                sid="LaunchFromOwnLaunchTemplates", actions=["ec2:CreateFleet", "ec2:RunInstances"],
                resources=[self._arn("launch-template")], conditions=self._owned_conditions("aws:ResourceTag")),
            iam.PolicyStatement(
                sid="TagOnlyOnCreate", actions=["ec2:CreateTags"], resources=created,
                conditions={"StringEquals": {
                    "ec2:CreateAction": ["CreateFleet", "CreateLaunchTemplate", "RunInstances"],
                    f"aws:RequestTag/{cluster_tag(cluster)}": "owned"}}),
            self._terminate_own(),
            iam.PolicyStatement(
                sid="DeleteOwnLaunchTemplates", actions=["ec2:DeleteLaunchTemplate"],
                resources=[self._arn("launch-template")], conditions=self._owned_conditions("aws:ResourceTag")),
            iam.PolicyStatement(
                sid="PassNodeRole", actions=["iam:PassRole"], resources=[self.node_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}),
            self._read_ami_parameters(),
        ]
        for statement in statements:
            self.provisioner_role.add_to_policy(statement)

    def _read_ami_parameters(self) -> iam.PolicyStatement:
        return iam.PolicyStatement(
            sid="ReadPublicAmiParameters", actions=["ssm:GetParameter"],
            resources=[self.stack.format_arn(service="ssm", account="", resource="parameter",
                                             resource_name="aws/service/*")])

    def _lifecycle_actions(self) -> iam.PolicyStatement:
        # The groups are whatever ASGs carry a terminate hook (managed node groups included), unknown at
        # deploy time; the action only completes or extends a hook's wait, it never launches or terminates.
        group = self.stack.format_arn(service="autoscaling", resource="autoScalingGroup",
                                      resource_name="*:autoScalingGroupName/*",
                                      arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)
        return iam.PolicyStatement(sid="CompleteLifecycleActions",
                                   actions=["autoscaling:CompleteLifecycleAction",
                                            "autoscaling:RecordLifecycleActionHeartbeat"], resources=[group])

    def _grant_interruption(self) -> None:
        for statement in (self._describe(INTERRUPTION_DESCRIBE), self._describe_cluster(), *self._terminate(),
                          self._lifecycle_actions()):
            self.interruption_role.add_to_policy(statement)

    def _grant_disruption(self) -> None:
        for statement in (self._describe(DISRUPTION_DESCRIBE), self._pricing(), self._describe_cluster(),
                          *self._terminate(), self._read_ami_parameters()):
            self.disruption_role.add_to_policy(statement)

    def allow_invoke_provisioner(self, provisioner_arn: str) -> None:
        """Interruption and disruption ask the provisioner for replacement capacity at once; the watcher
        wakes it."""
        roles = [self.interruption_role, self.disruption_role]
        if self.watcher_role is not None:
            roles.append(self.watcher_role)
        for role in roles:
            role.add_to_policy(iam.PolicyStatement(sid="InvokeProvisioner", actions=["lambda:InvokeFunction"],
                                                   resources=[provisioner_arn]))

    @property
    def function_roles(self) -> dict[str, iam.Role]:
        roles = {"provisioner": self.provisioner_role, "interruption": self.interruption_role,
                 "disruption": self.disruption_role}
        if self.watcher_role is not None:
            roles["watcher"] = self.watcher_role
        return roles

    # --- EKS access --------------------------------------------------------------------------------

    def _access_entries(self) -> None:
        cluster = self.config.cluster_name
        if self.config.node_role.create_access_entry:
            eks.CfnAccessEntry(self, "NodeAccessEntry", cluster_name=cluster,
                               principal_arn=self.node_role.role_arn, type="EC2_LINUX")
        admin = None
        if self.config.rbac.cluster_admin:
            admin = [eks.CfnAccessEntry.AccessPolicyProperty(
                policy_arn=CLUSTER_ADMIN_POLICY, access_scope=eks.CfnAccessEntry.AccessScopeProperty(type="cluster"))]
        for name, role in self.function_roles.items():
            if name == "watcher":
                continue
            eks.CfnAccessEntry(self, f"{name.capitalize()}AccessEntry", cluster_name=cluster,
                               principal_arn=role.role_arn, type="STANDARD",
                               kubernetes_groups=[KUBERNETES_GROUP], access_policies=admin)
        if self.watcher_role is not None:
            view = None
            if admin is not None:
                view = [eks.CfnAccessEntry.AccessPolicyProperty(
                    policy_arn=VIEW_POLICY, access_scope=eks.CfnAccessEntry.AccessScopeProperty(type="cluster"))]
            eks.CfnAccessEntry(self, "WatcherAccessEntry", cluster_name=cluster,
                               principal_arn=self.watcher_role.role_arn, type="STANDARD",
                               kubernetes_groups=[WATCHER_GROUP], access_policies=view)

    def rbac_command(self) -> str:
        """The one command an operator runs after deploying (printed as a stack output)."""
        region = self.stack.region
        return (f"aws eks update-kubeconfig --region {region} --name {self.config.cluster_name} && "
                f"kubectl apply -f {RBAC_MANIFEST.relative_to(RBAC_MANIFEST.parents[2])}"
                f" -f {WATCHER_RBAC_MANIFEST.relative_to(RBAC_MANIFEST.parents[2])}")
