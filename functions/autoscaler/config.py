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

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from autoscaler.domain.durations import duration_seconds
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.nodeclass import parse_node_classes
from autoscaler.domain.nodepool import parse_node_pools
from autoscaler.domain.quantity import QuantityError, cpu_millis, to_int

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

_RATE = re.compile(r"^rate\((?P<n>[1-9]\d*) (?P<unit>minute|minutes|hour|hours|day|days)\)$")
_CRON = re.compile(r"^cron\(\S+ \S+ \S+ \S+ \S+ \S+\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


def rate_seconds(expression: str) -> int | None:
    """Seconds between runs of a ``rate(...)`` schedule expression; None for ``cron(...)``."""
    match = _RATE.match(expression)
    if not match:
        return None
    return int(match["n"]) * _UNIT_SECONDS[match["unit"].rstrip("s")]


def _check_schedule(value: str) -> str:
    if rate_seconds(value) is None and not _CRON.match(value):
        raise ValueError(f"{value!r} is not an EventBridge schedule: use 'rate(N minutes)' or 'cron(m h d M w y)'")
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


class ProvisionerConfig(_Model):
    """The provisioner's schedule and watch mode."""

    watch_mode: bool = True
    dry_run: bool = False
    schedule: str = "rate(1 minute)"
    registration_timeout: str = "15m"
    # Stop watching this long before the next scheduled run so runs do not pile up behind the
    # reserved concurrency of 1.
    watch_margin_seconds: int = Field(default=10, ge=5, le=60)

    @field_validator("schedule")
    @classmethod
    def _rate_only(cls, value: str) -> str:
        if rate_seconds(value) is None:
            raise ValueError(f"{value!r}: the provisioner runs on a fixed 'rate(N minutes)' schedule")
        return value

    @field_validator("registration_timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        duration_seconds(value)
        return value

    @property
    def period_seconds(self) -> int:
        seconds = rate_seconds(self.schedule)
        assert seconds is not None  # guaranteed by the validator
        return seconds

    @property
    def watch_seconds(self) -> int:
        """How long one run keeps its watch open; 0 when watch mode is off."""
        if not self.watch_mode:
            return 0
        return min(self.period_seconds, 900) - self.watch_margin_seconds

    @property
    def timeout_seconds(self) -> int:
        """Lambda timeout: the watch window plus room for one final plan and CreateFleet call."""
        return min(self.watch_seconds + 30, 900) if self.watch_mode else 60


class DisruptionConfig(_Model):
    """The disruption (consolidation, expiry, empty-node removal) function's schedule and switches."""

    enabled: bool = True
    # Report what would be disrupted (logs, events, metrics) and change nothing.
    dry_run: bool = False
    schedule: str = "rate(1 minute)"
    timeout_seconds: int = Field(default=300, ge=30, le=900)
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


class NodeRoleConfig(_Model):
    """The IAM role nodes run with: created by the stack (default) or an existing one."""

    create: bool = True
    # Name of the role to create; defaults to Karpenter's convention, KarpenterNodeRole-<cluster>.
    role_name: str | None = Field(default=None, pattern=r"^[\w+=,.@-]{1,64}$")
    role_arn: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
    instance_profile_name: str | None = None
    # False when the role already has an EC2_LINUX access entry (e.g. one Karpenter created).
    create_access_entry: bool = True

    @model_validator(mode="after")
    def _one_source(self) -> NodeRoleConfig:
        if self.create and self.role_arn:
            raise ValueError("give either create: true or an existing roleArn, not both")
        if not self.create and not self.role_arn:
            raise ValueError("create: false needs roleArn of an existing node role")
        return self


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
        return self.node_role.role_name or f"KarpenterNodeRole-{self.cluster_name}"

    def to_json(self) -> str:
        """The runtime form bundled into the Lambda asset."""
        return self.model_dump_json(by_alias=True, indent=1)


# --- Karpenter object checks ------------------------------------------------------------------------

_NODEPOOL_KINDS = {("karpenter.sh/v1", "NodePool"), ("karpenter.sh/v1beta1", "NodePool"),
                   ("karpenter.sh/v1alpha5", "Provisioner")}
_NODECLASS_KINDS = {("karpenter.k8s.aws/v1", "EC2NodeClass"), ("karpenter.k8s.aws/v1beta1", "EC2NodeClass"),
                    ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate")}


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _check_objects(raw: list[dict[str, Any]], *, field: str, kinds: set[tuple[str, str]]) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for i, obj in enumerate(raw):
        where = f"{field}[{i}]"
        if (obj.get("apiVersion"), obj.get("kind")) not in kinds:
            allowed = ", ".join(f"{v} {k}" for v, k in sorted(kinds))
            problems.append(f"{where}: apiVersion/kind {obj.get('apiVersion')!r} {obj.get('kind')!r} "
                            f"is not one of: {allowed}")
        name = _dig(obj, "metadata", "name")
        if not isinstance(name, str) or not name:
            problems.append(f"{where}.metadata.name: required")
        elif name in seen:
            problems.append(f"{where}.metadata.name: {name!r} is defined twice")
        else:
            seen.add(name)
        if not isinstance(obj.get("spec"), Mapping):
            problems.append(f"{where}.spec: required")
    return problems


def _node_class_ref(pool: Mapping[str, Any]) -> tuple[str, str | None]:
    if pool.get("kind") == "Provisioner":
        return "spec.providerRef.name", _dig(pool, "spec", "providerRef", "name")
    return "spec.template.spec.nodeClassRef.name", _dig(pool, "spec", "template", "spec", "nodeClassRef", "name")


def check_karpenter_objects(config: ClusterConfig) -> list[str]:
    """Structural checks the CDK app can make without the domain: kinds, names, references, limits, roles."""
    problems = _check_objects(config.node_pools, field="nodePools", kinds=_NODEPOOL_KINDS)
    problems += _check_objects(config.node_classes, field="nodeClasses", kinds=_NODECLASS_KINDS)
    class_names = {_dig(c, "metadata", "name") for c in config.node_classes}
    for i, pool in enumerate(config.node_pools):
        path, ref = _node_class_ref(pool)
        if ref is not None and ref not in class_names:
            problems.append(f"nodePools[{i}].{path}: {ref!r} names no entry of nodeClasses")
        limits = _dig(pool, "spec", "limits") or {}
        if pool.get("kind") == "Provisioner":
            limits = _dig(pool, "spec", "limits", "resources") or {}
            path = "spec.limits.resources"
        else:
            path = "spec.limits"
        if not isinstance(limits, Mapping):
            problems.append(f"nodePools[{i}].{path}: must be a map of resource name to quantity")
            continue
        for resource, value in limits.items():
            try:
                cpu_millis(value) if resource == "cpu" else to_int(value)
            except (QuantityError, TypeError) as exc:
                problems.append(f"nodePools[{i}].{path}.{resource}: {value!r} is not a quantity ({exc})")
    for i, node_class in enumerate(config.node_classes):
        role = _dig(node_class, "spec", "role")
        if role is not None and role != config.node_role_name:
            problems.append(f"nodeClasses[{i}].spec.role: {role!r} is not the node role this stack lets the "
                            f"autoscaler pass ({config.node_role_name!r}); set nodeRole to match")
    return problems


def validate_karpenter_objects(config: ClusterConfig) -> list[str]:
    """All problems with the config's NodePools and EC2NodeClasses: structural checks, then the domain's
    own parsers (which produce the messages a user sees for Karpenter semantics). Returns
    ``"field.path: message"`` strings; empty means valid."""
    problems = check_karpenter_objects(config)
    if problems:
        return problems
    try:
        parse_node_pools(config.node_pools)
    except ConfigError as exc:
        problems.append(f"nodePools: {exc}")
    try:
        # v1alpha1 AWSNodeTemplates took the instance profile from a global setting; the stack's
        # node role plays that part here.
        parse_node_classes(config.node_classes, default_role=config.node_role_name)
    except ConfigError as exc:
        problems.append(f"nodeClasses: {exc}")
    return problems


# --- loading ------------------------------------------------------------------------------------------

def _messages(exc: ValidationError) -> list[str]:
    # pydantic prefixes custom messages with "Value error, "; the field name already says where.
    return [f"{_location(err['loc']) or '(top level)'}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()]


def _location(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_cluster_config(data: object, *, source: str) -> ClusterConfig:
    """Validate already-parsed file content; raises ConfigError naming ``source`` and every bad field."""
    if not isinstance(data, Mapping):
        raise ConfigError(source=source,
                          problems=["the file must hold a mapping (clusterName, region, nodePools, ...)"])
    try:
        config = ClusterConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source=source, problems=_messages(exc)) from None
    problems = validate_karpenter_objects(config)
    if problems:
        raise ConfigError(source=source, problems=problems)
    return config


def load_cluster_config(path: str | Path, *, source: str | None = None) -> ClusterConfig:
    """Read and validate a cluster file (YAML or JSON). Errors name ``source`` (default: the path)."""
    source = source or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source=source, problems=[f"cannot read the file: {exc.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source=source, problems=[f"not valid YAML: {exc}"]) from None
    return parse_cluster_config(data, source=source)


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
        raise ConfigError(source=str(chosen), problems=_messages(exc)) from None


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
