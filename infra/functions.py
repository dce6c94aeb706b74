"""The Lambda functions (provisioner, interruption, disruption, and with ``provisioner.reaction: watcher``
the watcher), their log groups, schedules and the SQS event source. Python 3.13 on arm64 (infra/bundling.py
compiles the asset's bytecode for it); Powertools settings, the cluster's VPC when
configured. X-Ray active tracing ($5 per million traces) only on the interruption function, whose rare
invocations cross EC2, SQS and the API server on the way to a drain: the idle bill has no room for a trace
per safety pass, disruption pass or watcher run (docs/cost.md), and a provisioner pass already reports its
timings in its decision log and metrics."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from autoscaler import config as cfg
from autoscaler import watcher_settings as ws
from autoscaler.metrics_catalog import NAMESPACE, service_name
from infra.bundling import RUNTIME as BUNDLE_RUNTIME
from infra.claims_table import ClaimsTable
from infra.identity import Identity
from infra.lambda_limits import MAX_EVENT_AGE_SECONDS, RESERVED_CONCURRENCY, SCHEDULED_FUNCTIONS

# The runtime whose Python compiles the asset's bytecode (infra/bundling.py).
RUNTIME = BUNDLE_RUNTIME
ARCHITECTURE = lambda_.Architecture.ARM_64
HANDLERS = {
    "provisioner": "autoscaler.handlers.provisioner.handler",
    "interruption": "autoscaler.handlers.interruption.handler",
    "disruption": "autoscaler.handlers.disruption.handler",
    "watcher": "autoscaler.handlers.watcher.handler",
}
# Solving is CPU-bound and Lambda's CPU share grows with memory; the provisioner's and disruption's are set
# in the cluster file (``memoryMb``; the provisioner's default is per reaction, config.DEFAULT_PROVISIONER_MEMORY_MB;
# disruption's 1,024), the interruption function mostly waits on drains.
INTERRUPTION_MEMORY_MB = 512
# The watcher waits on a socket all month: the smallest size (its imports take ~54 MB; docs/cost.md). One invocation
# per period, each running OVERLAP_SECONDS longer so the next one is watching before it stops; reserved
# concurrency 2 lets the two overlap. No X-Ray: a trace per 5-minute wait shows nothing worth $5/million.
WATCHER_MEMORY_MB = 128
WATCHER_SCHEDULE = "rate(10 minutes)"
WATCHER_PERIOD_SECONDS = 600
WATCHER_TIMEOUT_SECONDS = WATCHER_PERIOD_SECONDS + ws.OVERLAP_SECONDS + int(ws.END_RESERVE_SECONDS)
ENI_ACTIONS = ("ec2:AssignPrivateIpAddresses", "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface",
               "ec2:DescribeNetworkInterfaces", "ec2:UnassignPrivateIpAddresses")
# A scheduled run that waited behind the previous one (reserved concurrency 1) is dropped after a minute:
# the next tick comes anyway, and stale ticks must not queue up (infra/lambda_limits.py).
MAX_EVENT_AGE = cdk.Duration.seconds(MAX_EVENT_AGE_SECONDS)


class Functions(Construct):
    """``provisioner``, ``interruption``, ``disruption``, ``watcher`` (lambda_.Function; the watcher None
    unless ``provisioner.reaction: watcher``) and ``log_groups`` are public."""

    def __init__(self, scope: Construct, construct_id: str, *, config: cfg.ClusterConfig, identity: Identity,
                 code: lambda_.Code, queue: sqs.IQueue, claims: ClaimsTable) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.identity = identity
        self.code = code
        self.log_groups: dict[str, logs.LogGroup] = {}
        common = {"POWERTOOLS_SERVICE_NAME": service_name(config.cluster_name),
                  "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
                  "POWERTOOLS_LOG_LEVEL": "INFO"}
        self.provisioner = self._function(
            "provisioner", timeout=config.provisioner.timeout_seconds, tracing=False,
            environment={**common,
                         cfg.ENV_NODE_ROLE_ARN: identity.node_role.role_arn,
                         cfg.ENV_CLAIMS_TABLE: claims.table.table_name,
                         cfg.ENV_INSTANCE_PROFILE: identity.instance_profile.instance_profile_name})
        identity.allow_invoke_provisioner(self.provisioner.function_arn)
        claims.grant(identity.function_roles["provisioner"])
        self.interruption = self._function(
            "interruption", timeout=config.interruption.timeout_seconds,
            environment={**common, cfg.ENV_QUEUE_URL: queue.queue_url,
                         cfg.ENV_PROVISIONER_FUNCTION: self.provisioner.function_name})
        # Disruption decisions assume a stable view of the cluster: never two runs at once.
        self.disruption = self._function(
            "disruption", timeout=config.disruption.timeout_seconds, tracing=False,
            environment={**common, cfg.ENV_PROVISIONER_FUNCTION: self.provisioner.function_name})
        self.watcher: lambda_.Function | None = None
        if config.provisioner.mode == "watcher":
            self.watcher = self._function(
                "watcher", timeout=WATCHER_TIMEOUT_SECONDS, tracing=False,
                environment={ws.ENV_CLUSTER_NAME: config.cluster_name,
                             ws.ENV_PROVISIONER_FUNCTION: self.provisioner.function_name,
                             ws.ENV_BATCH_IDLE: f"{config.provisioner.batch_idle_seconds:g}",
                             ws.ENV_BATCH_MAX: f"{config.provisioner.batch_max_seconds:g}"})
            self._schedule("watcher", self.watcher, WATCHER_SCHEDULE, enabled=True)
        self._schedule("provisioner", self.provisioner, config.provisioner.schedule_expression, enabled=True)
        self._schedule("disruption", self.disruption, config.disruption.schedule, enabled=config.disruption.enabled)
        self.interruption.add_event_source(sources.SqsEventSource(
            queue,
            batch_size=config.interruption.batch_size,
            report_batch_item_failures=True,
            max_concurrency=config.interruption.max_concurrency,
        ))

    @property
    def all(self) -> dict[str, lambda_.Function]:
        functions = {"provisioner": self.provisioner, "interruption": self.interruption,
                     "disruption": self.disruption}
        if self.watcher is not None:
            functions["watcher"] = self.watcher
        return functions

    def _function(self, name: str, *, timeout: int, environment: dict[str, str],
                  tracing: bool = True) -> lambda_.Function:
        title = name.capitalize()
        role = self.identity.function_roles[name]
        log_group = logs.LogGroup(self, f"{title}Logs", removal_policy=cdk.RemovalPolicy.DESTROY)
        # RetentionDays is a name-valued enum; the validated day count goes straight to CloudFormation.
        cfn_log_group = log_group.node.default_child
        assert isinstance(cfn_log_group, logs.CfnLogGroup)
        cfn_log_group.retention_in_days = self.config.log_retention_days
        self.log_groups[name] = log_group
        role.add_to_policy(iam.PolicyStatement(sid="WriteOwnLogs",
                                               actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                                               resources=[log_group.log_group_arn]))
        scheduled = name in SCHEDULED_FUNCTIONS
        if not tracing and "POWERTOOLS_SERVICE_NAME" in environment:
            # Untraced: Powertools' tracer then neither builds segments nor patches the SDK.
            environment = {**environment, "POWERTOOLS_TRACE_DISABLED": "true"}
        function = lambda_.Function(
            self, title,
            description=f"Serverless EKS autoscaler {name} for cluster {self.config.cluster_name}",
            code=self.code,
            handler=HANDLERS[name],
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            memory_size=self._memory_mb(name),
            timeout=cdk.Duration.seconds(timeout),
            reserved_concurrent_executions=RESERVED_CONCURRENCY[name],
            role=role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE if tracing else lambda_.Tracing.DISABLED,
            environment=environment,
            retry_attempts=0 if scheduled else None,
            max_event_age=MAX_EVENT_AGE if scheduled else None,
        )
        if self.config.vpc:
            self._attach_vpc(function, role)
        self._depend_on_policy_only(function, role)
        return function

    def _memory_mb(self, name: str) -> int:
        if name == "provisioner":
            return self.config.provisioner.memory
        if name == "disruption":
            return self.config.disruption.memory_mb
        return WATCHER_MEMORY_MB if name == "watcher" else INTERRUPTION_MEMORY_MB

    @staticmethod
    def _depend_on_policy_only(function: lambda_.Function, role: iam.Role) -> None:
        # CDK makes the function depend on the role and its policy; the role is already implied by the
        # GetAtt (cfn-lint W3005), the policy is the part that must exist before the first invocation.
        policy = role.node.try_find_child("DefaultPolicy")
        assert policy is not None
        cfn_policy = policy.node.default_child
        assert isinstance(cfn_policy, iam.CfnPolicy)
        cfn_function = function.node.default_child
        assert isinstance(cfn_function, lambda_.CfnFunction)
        cfn_function.add_override("DependsOn", [cdk.Stack.of(function).get_logical_id(cfn_policy)])

    def _attach_vpc(self, function: lambda_.Function, role: iam.Role) -> None:
        vpc = self.config.vpc
        assert vpc is not None
        # Imported subnets and groups by id: the cluster's VPC is not managed here, and looking it up
        # would need AWS credentials at synth time.
        cfn = function.node.default_child
        assert isinstance(cfn, lambda_.CfnFunction)
        cfn.vpc_config = lambda_.CfnFunction.VpcConfigProperty(subnet_ids=vpc.subnet_ids,
                                                               security_group_ids=vpc.security_group_ids)
        role.add_to_policy(iam.PolicyStatement(
            sid="ManageVpcInterfaces", actions=list(ENI_ACTIONS), resources=["*"],
            conditions={"StringEquals": {"aws:RequestedRegion": cdk.Stack.of(self).region}}))

    def _schedule(self, name: str, function: lambda_.Function, expression: str, *, enabled: bool) -> None:
        scheduler.Schedule(
            self, f"{name.capitalize()}Schedule",
            description=f"Runs the {name} of cluster {self.config.cluster_name}",
            schedule=scheduler.ScheduleExpression.expression(expression),
            target=scheduler_targets.LambdaInvoke(
                function,
                input=scheduler.ScheduleTargetInput.from_object({"source": "schedule", "kind": name}),
                retry_attempts=0,
                max_event_age=MAX_EVENT_AGE,
            ),
            enabled=enabled,
        )
