"""The per-cluster configuration: one file per cluster (``clusters/<name>.yaml``) read by the CDK app at
synth time and by the Lambda handlers at run time.

The file holds the cluster's identity, its NodePools and EC2NodeClasses as raw Karpenter manifests
(the domain parses them), and the deployment settings (interruption actions, schedules, VPC, node role,
RBAC, logs, alarms). This module is pure: no boto3, Kubernetes or Powertools imports, so the CDK app
and the handlers share it.

At run time the configuration travels as a JSON file bundled in the Lambda asset at
``autoscaler/cluster.json`` (Lambda environment variables are limited to 4 KB in total, which a few
NodePools exceed; a bundled file also needs no extra IAM permission or cold-start call, unlike SSM).
Values that exist only after deployment (queue URL, function and role names) are environment
variables, read by :func:`load_deployment_env`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from autoscaler.domain.batching import BATCH_IDLE_SECONDS, BATCH_MAX_SECONDS
from autoscaler.domain.claims import LAUNCH_SETTLE_SECONDS
from autoscaler.domain.durations import duration_seconds
from autoscaler.domain.errors import ConfigError, Problem, did_you_mean, with_lines
from autoscaler.domain.manifest_check import check_node_classes, check_node_pools, node_class_names
from autoscaler.domain.schedule_expression import rate_problem, rate_seconds, schedule_problem
from autoscaler.source_file import MAX_CONFIG_BYTES, parse_yaml, read_text

# Where the bundled configuration lives inside the Lambda asset, and how to point elsewhere (tests, local runs).
BUNDLED_CONFIG = Path(__file__).with_name("cluster.json")
ENV_CONFIG_FILE = "AUTOSCALER_CONFIG_FILE"
# Deployment-time values the stack passes to every function as environment variables.
ENV_QUEUE_URL = "AUTOSCALER_QUEUE_URL"
ENV_PROVISIONER_FUNCTION = "AUTOSCALER_PROVISIONER_FUNCTION"
ENV_NODE_ROLE_ARN = "AUTOSCALER_NODE_ROLE_ARN"
ENV_INSTANCE_PROFILE = "AUTOSCALER_INSTANCE_PROFILE"
ENV_CLAIMS_TABLE = "AUTOSCALER_CLAIMS_TABLE"

InterruptionAction = Literal["drain", "taint", "ignore"]
# CloudWatch Logs accepts only these retention periods.
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
                      2922, 3288, 3653)

__all__ = ["rate_seconds"]  # EventBridge grammar: domain/schedule_expression.py


def _check_schedule(value: str) -> str:
    problem = schedule_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class _Model(BaseModel):
    # camelCase in the file (Karpenter's and Kubernetes' convention), snake_case in Python.
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class InterruptionConfig(_Model):
    """What the interruption function does for each kind of EC2 event, and how it consumes the queue."""

    spot_interruption: Literal["drain", "ignore"] = "drain"
    # A rebalance recommendation often precedes no interruption at all: tainting stops new pods landing
    # on the node without evicting the ones already there (Karpenter and NTH default to the same).
    rebalance: InterruptionAction = "taint"
    scheduled_change: InterruptionAction = "drain"
    state_change: Literal["drain", "ignore"] = "drain"
    # An Auto Scaling group's terminate lifecycle hook: drain, then CompleteLifecycleAction(CONTINUE).
    asg_lifecycle: Literal["drain", "ignore"] = "drain"
    batch_size: int = Field(default=10, ge=1, le=10)
    # SQS event sources accept 2..1000; a bound keeps a burst of events from exhausting account concurrency.
    max_concurrency: int = Field(default=10, ge=2, le=1000)
    timeout_seconds: int = Field(default=120, ge=30, le=900)
    # Node Termination Handler parity (docs/interruption.md): cordon (and taint, and ask for capacity)
    # without draining; log what would be done and change nothing; every eviction's grace period in
    # seconds (unset: each pod's own); the most one node's drain may take; nodes whose labels match all of
    # these are left alone; evict pods with emptyDir data; delete finished pods left on a drained node.
    cordon_only: bool = False
    dry_run: bool = False
    pod_termination_grace_period: int | None = Field(default=None, ge=0, le=3600)
    node_termination_grace_period: int | None = Field(default=None, ge=1, le=3600)
    exclude_node_labels: dict[str, str] = Field(default_factory=dict)
    delete_local_data: bool = True
    delete_finished_pods: bool = False


Reaction = Literal["watcher", "watch", "scheduled"]
# How often the provisioner runs on its own, per reaction: with the watcher it is only a safety pass.
DEFAULT_PROVISIONER_SCHEDULE: dict[str, str] = {"watcher": "rate(10 minutes)", "watch": "rate(1 minute)",
                                                "scheduled": "rate(1 minute)"}


# The provisioner's memory per reaction. A pass is CPU-bound (a 50,000-pod burst is seconds of parsing and
# planning) and Lambda gives one full vCPU at 1,769 MB: woken by the watcher or the schedule, it is billed only
# while it runs, and a CPU-bound pass's GB-seconds hardly change below one vCPU (half the memory, twice the
# time), so it gets the whole vCPU (docs/cost.md: +$0.01 a month idle). Watch mode bills the memory for the
# whole watch, so it stays at 1,024 MB (~$30/month; 256 MB ~$7.5 at ~4x slower planning).
DEFAULT_PROVISIONER_MEMORY_MB: dict[str, int] = {"watcher": 1769, "watch": 1024, "scheduled": 1769}


class ProvisionerConfig(_Model):
    """The provisioner's reaction path, schedule and memory."""

    # How pending pods reach the planner (docs/provisioner.md): a 128 MB watcher function wakes it per batch
    # (seconds, ~$5/month idle); the planner keeps its own watch open between runs (seconds, ~$30 at
    # 1,024 MB); or only the schedule (up to a period of delay, cheapest).
    reaction: Reaction | None = None
    # Replaced by ``reaction`` (true: watch, false: scheduled); still read so older files keep working.
    watch_mode: bool | None = None
    dry_run: bool = False
    # Default per reaction (DEFAULT_PROVISIONER_SCHEDULE).
    schedule: str | None = None
    registration_timeout: str = "15m"
    # Stop watching this long before the next scheduled run so runs do not pile up behind the
    # reserved concurrency of 1.
    watch_margin_seconds: int = Field(default=10, ge=5, le=60)
    # Lambda memory (and so CPU share); default per reaction (DEFAULT_PROVISIONER_MEMORY_MB, ``memory``).
    memory_mb: int | None = Field(default=None, ge=128, le=10240)
    # The batching window of the watcher and of watch mode (Karpenter's BATCH_IDLE/MAX_DURATION): a shorter
    # idle window reacts sooner to a trickle of pods, at the price of more, smaller passes (docs/provisioner.md).
    batch_idle_seconds: float = Field(default=BATCH_IDLE_SECONDS, gt=0, le=60)
    batch_max_seconds: float = Field(default=BATCH_MAX_SECONDS, gt=0, le=60)

    @field_validator("schedule")
    @classmethod
    def _rate_only(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if value.strip().startswith("rate("):
            problem = rate_problem(value)
            if problem:
                raise ValueError(problem)
        elif rate_seconds(value) is None:
            raise ValueError(f"{value!r}: the provisioner runs on a fixed schedule; write 'rate(N minutes)', "
                             "e.g. 'rate(1 minute)'")
        return value

    @field_validator("registration_timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        # A launch's claim counts as in-flight capacity for LAUNCH_SETTLE_SECONDS; an instance timed out
        # before that would be terminated while the next pass still waits for it, then launched again.
        if duration_seconds(value) < LAUNCH_SETTLE_SECONDS:
            raise ValueError(f"{value!r} must be at least {LAUNCH_SETTLE_SECONDS:g}s: a launched instance "
                             f"is counted as coming capacity for {LAUNCH_SETTLE_SECONDS:g}s; write e.g. '5m'")
        return value

    @model_validator(mode="after")
    def _one_reaction(self) -> ProvisionerConfig:
        if self.batch_idle_seconds > self.batch_max_seconds:
            raise ValueError(f"batchIdleSeconds: {self.batch_idle_seconds:g} is longer than batchMaxSeconds: "
                             f"{self.batch_max_seconds:g}; the idle window must fit in the batch's maximum")
        if self.reaction is not None and self.watch_mode is not None and \
                self.reaction != ("watch" if self.watch_mode else "scheduled"):
            raise ValueError(f"watchMode: {str(self.watch_mode).lower()} contradicts reaction: {self.reaction}; "
                             "watchMode is replaced by reaction: remove watchMode")
        return self

    @property
    def mode(self) -> Reaction:
        """The reaction path in effect: ``reaction``, else the legacy ``watchMode``, else the watcher."""
        if self.reaction is not None:
            return self.reaction
        if self.watch_mode is not None:
            return "watch" if self.watch_mode else "scheduled"
        return "watcher"

    @property
    def schedule_expression(self) -> str:
        return self.schedule or DEFAULT_PROVISIONER_SCHEDULE[self.mode]

    @property
    def memory(self) -> int:
        """The memory size deployed: ``memoryMb``, else the reaction's default (DEFAULT_PROVISIONER_MEMORY_MB)."""
        return self.memory_mb or DEFAULT_PROVISIONER_MEMORY_MB[self.mode]

    @property
    def period_seconds(self) -> int:
        seconds = rate_seconds(self.schedule_expression)
        assert seconds is not None  # guaranteed by the validator
        return seconds

    @property
    def watch_seconds(self) -> int:
        """How long one run keeps its own watch open; 0 unless the reaction is ``watch``."""
        if self.mode != "watch":
            return 0
        return min(self.period_seconds, 900) - self.watch_margin_seconds

    @property
    def timeout_seconds(self) -> int:
        """Lambda timeout: the watch window plus room for one final plan and CreateFleet call."""
        return min(self.watch_seconds + 30, 900) if self.mode == "watch" else 60


class DisruptionConfig(_Model):
    """The disruption (consolidation, expiry, empty-node removal) function's schedule and switches."""

    enabled: bool = True
    # Report what would be disrupted (logs, events, metrics) and change nothing.
    dry_run: bool = False
    schedule: str = "rate(1 minute)"
    timeout_seconds: int = Field(default=300, ge=30, le=900)
    memory_mb: int = Field(default=1024, ge=128, le=10240)
    # A drain a PodDisruptionBudget still blocks after this long is abandoned: the node is uncordoned so
    # its capacity is not lost.
    blocked_drain_timeout: str = "30m"
    # How long a pass keeps evicting from one node before moving on (later passes continue the drain).
    drain_seconds_per_pass: int = Field(default=60, ge=5, le=840)
    # Give up a replacement that has not registered (and left room for the pods) after this long.
    replacement_timeout: str = "20m"
    # Pods without a controller do not come back after eviction; they block voluntary disruption unless allowed.
    allow_bare_pods: bool = False
    # Karpenter keeps spot -> spot consolidation behind a feature gate for the same reason: the cheapest
    # spot offering is often the least available.
    spot_to_spot_consolidation: bool = False
    # Replace nodes unhealthy past their tolerations (Karpenter's NodeRepair feature gate; on here, as in
    # EKS Auto Mode) and nodes that drifted from their NodePool / EC2NodeClass.
    node_repair: bool = True
    drift: bool = True
    # Karpenter v1: an expired node is drained whatever its budgets and do-not-disrupt say, and a PDB holds
    # it only until the NodePool's terminationGracePeriod (never released). Graceful: expiry waits for
    # budgets, do-not-disrupt and PDBs like the other reasons (a blocked drain is released).
    expiry: Literal["Forceful", "Graceful"] = "Forceful"

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        return _check_schedule(value)

    @field_validator("blocked_drain_timeout", "replacement_timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        duration_seconds(value)
        return value


class VpcConfig(_Model):
    """Run the functions in the cluster's VPC (needed when the EKS API endpoint is private)."""

    vpc_id: str = Field(pattern=r"^vpc-[0-9a-f]{8,17}$")
    subnet_ids: list[str] = Field(min_length=1)
    security_group_ids: list[str] = Field(min_length=1)

    @field_validator("subnet_ids", "security_group_ids")
    @classmethod
    def _ids(cls, value: list[str], info: ValidationInfo) -> list[str]:
        prefix, what = ("subnet", "subnet ids") if info.field_name == "subnet_ids" else ("sg", "security group ids")
        bad = [s for s in value if not re.match(rf"^{prefix}-[0-9a-f]{{8,17}}$", s)]
        if bad:
            raise ValueError(f"not {what}: {bad}")
        return value


NODE_ROLE_PREFIX = "eks-autoscaler-node-"


def default_node_role_name(cluster_name: str) -> str:
    """``eks-autoscaler-node-<cluster>``: not Karpenter's ``KarpenterNodeRole-<cluster>``, which its
    getting-started stack has usually created already (a role of the same name would fail the deploy).
    Names over IAM's 64 characters are cut and end in a hash of the cluster name, so they stay unique."""
    name = f"{NODE_ROLE_PREFIX}{cluster_name}"
    if len(name) <= 64:
        return name
    return f"{name[:55]}-{hashlib.sha256(cluster_name.encode()).hexdigest()[:8]}"


class NodeRoleConfig(_Model):
    """The IAM role nodes run with: created by the stack (default) or an existing one."""

    create: bool = True
    # With create: the name of the role to create (default eks-autoscaler-node-<cluster>). With create: false:
    # the name of an existing role in the stack's account (e.g. Karpenter's KarpenterNodeRole-<cluster>).
    role_name: str | None = Field(default=None, pattern=r"^[\w+=,.@-]{1,64}$")
    role_arn: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
    instance_profile_name: str | None = None
    # False when the role already has an EC2_LINUX access entry (e.g. one Karpenter created).
    create_access_entry: bool = True

    @model_validator(mode="after")
    def _one_source(self) -> NodeRoleConfig:
        if self.create and self.role_arn:
            raise ValueError("give either create: true or an existing roleArn, not both")
        if not self.create and not self.role_arn and not self.role_name:
            raise ValueError("create: false needs roleArn or roleName of an existing node role "
                             "(e.g. roleName: KarpenterNodeRole-<cluster>)")
        if self.role_arn and self.role_name:
            raise ValueError("give roleArn or roleName of the existing node role, not both")
        return self


class MigrationConfig(_Model):
    """Taking over a cluster from Karpenter (docs/migration.md)."""

    # Manage the nodes Karpenter launched for this cluster (``karpenter.sh/nodepool`` or v0.2x
    # ``karpenter.sh/provisioner-name`` tag plus the cluster tag) like the autoscaler's own: disruption
    # (empty, expired, consolidation), interruption, termination, and removal of Karpenter's
    # ``karpenter.sh/termination`` finalizer when their Node is deleted. Only once Karpenter is scaled to zero.
    adopt_karpenter_nodes: bool = False


class RbacConfig(_Model):
    """Kubernetes permissions of the Lambda roles."""

    # Opt-in: associate AmazonEKSClusterAdminPolicy instead of relying on the shipped ClusterRole.
    cluster_admin: bool = False


class AlarmsConfig(_Model):
    """Where alarm notifications go; alarms exist either way."""

    email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    topic_arn: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[\w-]+$")


class ClusterConfig(_Model):
    """One cluster file."""

    cluster_name: str = Field(pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
    region: str = Field(pattern=r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d$")
    account: str | None = Field(default=None, pattern=r"^\d{12}$")
    kubernetes_version: str | None = Field(default=None, pattern=r"^1\.\d{2}$")
    node_pools: list[dict[str, Any]] = Field(min_length=1)
    node_classes: list[dict[str, Any]] = Field(min_length=1)
    interruption: InterruptionConfig = InterruptionConfig()
    provisioner: ProvisionerConfig = ProvisionerConfig()
    disruption: DisruptionConfig = DisruptionConfig()
    vpc: VpcConfig | None = None
    node_role: NodeRoleConfig = NodeRoleConfig()
    migration: MigrationConfig = MigrationConfig()
    rbac: RbacConfig = RbacConfig()
    log_retention_days: int = 30
    alarms: AlarmsConfig = AlarmsConfig()
    tags: dict[str, str] = Field(default_factory=dict)

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"{value} is not a CloudWatch Logs retention period; use one of {LOG_RETENTION_DAYS}")
        return value

    @property
    def node_role_name(self) -> str:
        """The node role's name, as EC2NodeClass ``spec.role`` must spell it."""
        if self.node_role.role_arn:
            return self.node_role.role_arn.rsplit("/", 1)[-1]
        return self.node_role.role_name or default_node_role_name(self.cluster_name)

    def to_json(self) -> str:
        """The runtime form bundled into the Lambda asset."""
        return self.model_dump_json(by_alias=True, indent=1)


# --- checking a whole cluster file ------------------------------------------------------------------

def _fields_at(loc: Sequence[int | str]) -> list[str]:
    """The camelCase keys of the model at ``loc`` (for a did-you-mean on an unknown key)."""
    model: Any = ClusterConfig
    for part in loc:
        if isinstance(part, int) or not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        info = next((f for f in model.model_fields.values() if f.alias == part), None)
        if info is None:
            return []
        model = next((a for a in (info.annotation, *get_args(info.annotation))
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or name for name, f in model.model_fields.items()]
    return []


def _model_problems(exc: ValidationError) -> list[Problem]:
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden" and loc:
            message = f"unknown key {loc[-1]!r}; {did_you_mean(str(loc[-1]), _fields_at(loc[:-1]))}"
        else:
            # pydantic prefixes custom messages with "Value error, "; the field name already says where.
            message = err["msg"].removeprefix("Value error, ")
        out.append(Problem(message, loc))
    return out


def _node_role_name(data: Mapping[str, Any], config: ClusterConfig | None) -> str | None:
    if config is not None:
        return config.node_role_name
    try:  # the rest of the file is invalid: the role can still be checked when its own settings are valid
        role = NodeRoleConfig.model_validate(data.get("nodeRole") or {})
        name = str(data.get("clusterName") or "")
        return ClusterConfig.model_construct(cluster_name=name, node_role=role).node_role_name if name else None
    except (ValidationError, ValueError, TypeError):
        return None


def check_cluster_data(data: object) -> tuple[ClusterConfig | None, list[Problem]]:
    """Every problem of a parsed cluster file, errors and warnings, in one pass: the file's own keys, then
    every NodePool and EC2NodeClass at every depth, whether or not the rest is valid."""
    if not isinstance(data, Mapping):
        return None, [Problem("the file must hold a mapping (clusterName, region, nodePools, ...)")]
    config: ClusterConfig | None = None
    problems: list[Problem] = []
    try:
        config = ClusterConfig.model_validate(data)
    except ValidationError as exc:
        problems += _model_problems(exc)
    pools, classes = data.get("nodePools"), data.get("nodeClasses")
    if isinstance(classes, list):
        problems += check_node_classes(classes, default_role=_node_role_name(data, config))
    if isinstance(pools, list):
        names = node_class_names(classes) if isinstance(classes, list) else None
        problems += check_node_pools(pools, node_classes=names)
    errors = [p for p in problems if p.severity == "error"]
    return (config if not errors else None), problems


def parse_cluster_config(data: object, *, source: str) -> ClusterConfig:
    """Validate already-parsed file content; raises ConfigError naming ``source`` and every bad field."""
    config, problems = check_cluster_data(data)
    errors = [p for p in problems if p.severity == "error"]
    if errors or config is None:
        raise ConfigError.from_problems(errors, source=source)
    return config


def check_cluster_file(path: str | Path) -> tuple[ClusterConfig | None, list[Problem]]:
    """Read and check a cluster file: every problem (with its line), errors and warnings. Never raises."""
    text, problems = read_text(path, max_bytes=MAX_CONFIG_BYTES)
    if text is None:
        return None, problems
    doc = parse_yaml(text)[0]
    if doc.problems and doc.data is None:
        return None, doc.problems
    config, found = check_cluster_data(doc.data)
    problems = with_lines([*doc.problems, *found], doc.lines)
    if any(p.severity == "error" for p in doc.problems):
        config = None
    return config, problems


def load_cluster_config(path: str | Path, *, source: str | None = None) -> ClusterConfig:
    """Read and validate a cluster file (YAML or JSON). Errors name ``source`` (default: the path), each
    line ``file:line: object: field: what is wrong``; warnings do not stop the load."""
    config, problems = check_cluster_file(path)
    errors = [p for p in problems if p.severity == "error"]
    if errors or config is None:
        raise ConfigError.from_problems(errors, source=source or str(path))
    return config


def load_runtime_config(path: str | Path | None = None, *, environ: Mapping[str, str] | None = None) -> ClusterConfig:
    """The configuration a Lambda runs with: ``path``, else ``$AUTOSCALER_CONFIG_FILE``, else the file
    bundled in the asset. Only the model is validated (the CDK app ran the full checks at synth)."""
    env = os.environ if environ is None else environ
    chosen = Path(path) if path is not None else Path(env.get(ENV_CONFIG_FILE) or BUNDLED_CONFIG)
    try:
        data = json.loads(chosen.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(source=str(chosen),
                          problems=[f"cannot read the runtime configuration: {exc.strerror}"]) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(source=str(chosen), problems=[f"not valid JSON: {exc}"]) from None
    try:
        return ClusterConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source=str(chosen), problems=[p.render() for p in _model_problems(exc)]) from None


class DeploymentEnv(_Model):
    """Values known only after deployment, passed to the functions as environment variables."""

    queue_url: str | None = None
    provisioner_function: str | None = None
    node_role_arn: str | None = None
    instance_profile: str | None = None
    claims_table: str | None = None  # the DynamoDB table of node claims (docs/provisioner.md)


def load_deployment_env(environ: Mapping[str, str] | None = None) -> DeploymentEnv:
    env = os.environ if environ is None else environ
    return DeploymentEnv(
        queue_url=env.get(ENV_QUEUE_URL),
        provisioner_function=env.get(ENV_PROVISIONER_FUNCTION),
        node_role_arn=env.get(ENV_NODE_ROLE_ARN),
        instance_profile=env.get(ENV_INSTANCE_PROFILE),
        claims_table=env.get(ENV_CLAIMS_TABLE),
    )
