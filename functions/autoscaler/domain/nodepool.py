"""NodePool (``karpenter.sh/v1``, and ``v1beta1``) and the older Provisioner (``karpenter.sh/v1alpha5``),
validated and converted to one model, ``NodePool``.

The scheduler reads template labels, taints, requirements, limits and weight; the disruption logic
reads ``disruption``. Karpenter's default requirements are applied here, once, so every consumer sees
the same effective requirements (see docs/scheduling.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from autoscaler.domain import resources as res
from autoscaler.domain.cron import parse_cron
from autoscaler.domain.durations import optional_duration_seconds
from autoscaler.domain.errors import ConfigError, describe_validation_error, manifest_header
from autoscaler.domain.keys import (
    ARCH_LABEL,
    CAPACITY_TYPE_LABEL,
    CATEGORY_LABEL,
    GENERATION_LABEL,
    INSTANCE_SHAPE_KEYS,
    OS_LABEL,
)
from autoscaler.domain.models import Requirement, Taint
from autoscaler.domain.nodeclass import KubeletConfiguration
from autoscaler.domain.quantity import QuantityError

ConsolidationPolicy = Literal["WhenEmpty", "WhenEmptyOrUnderutilized"]
DisruptionReason = Literal["Underutilized", "Empty", "Drifted", "Expired"]


parse_duration = optional_duration_seconds


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class _Lenient(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class Budget(_Model):
    """A disruption budget: at most ``nodes`` (count or "10%") disrupted at once, optionally only for
    some reasons and only in a cron ``schedule`` window of ``duration``."""

    nodes: int | str = "10%"
    reasons: tuple[DisruptionReason, ...] | None = None
    schedule: str | None = None
    duration: int | None = None  # seconds

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, v: Any) -> int | str:
        if isinstance(v, int):
            if v < 0:
                raise ValueError("must be >= 0")
            return v
        text = str(v).strip()
        if text.endswith("%") and text[:-1].isdigit() and int(text[:-1]) <= 100:
            return text
        if text.isdigit():
            return int(text)
        raise ValueError(f"{v!r} must be a node count or a percentage like '10%'")

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> int | None:
        return parse_duration(v, field="duration")

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        if v is not None:
            parse_cron(v)  # CronError is a ValueError: pydantic reports it on this field
        return v

    @model_validator(mode="after")
    def _window(self) -> Budget:
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("schedule and duration must be set together")
        return self


class Disruption(_Model):
    consolidation_policy: ConsolidationPolicy = "WhenEmptyOrUnderutilized"
    consolidate_after: int | None = 0  # seconds; None = Never
    expire_after: int | None = 720 * 3600  # seconds; None = Never
    budgets: tuple[Budget, ...] = (Budget(),)


class NodePool(_Model):
    """The validated NodePool. ``requirements`` already include Karpenter's defaults."""

    name: str
    weight: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    requirements: tuple[Requirement, ...] = ()
    limits: dict[str, int] = Field(default_factory=dict)  # canonical units (resources.py)
    node_class_ref: str = "default"
    kubelet: KubeletConfiguration | None = None
    disruption: Disruption = Field(default_factory=Disruption)
    termination_grace_period: int | None = None
    replicas: int | None = None  # a static NodePool: this many nodes whatever the pods (Karpenter v1.x)

    @property
    def is_static(self) -> bool:
        return self.replicas is not None

    def requirement(self, key: str) -> Requirement | None:
        return next((r for r in self.requirements if r.key == key), None)

    @property
    def capacity_types(self) -> tuple[str, ...]:
        """Capacity types this NodePool allows, spot first (the scheduler's preference order)."""
        out = []
        for ct in ("spot", "on-demand"):
            if all(requirement_allows(r, ct) for r in self.requirements if r.key == CAPACITY_TYPE_LABEL):
                out.append(ct)
        return tuple(out)

    @property
    def allows_reserved(self) -> bool:
        """Whether the capacity-type requirement lets nodes launch into capacity reservations (Karpenter
        v1's ``reserved``; never by default, as the default requirement is ``In [on-demand]``)."""
        return all(requirement_allows(r, "reserved") for r in self.requirements if r.key == CAPACITY_TYPE_LABEL)


def requirement_allows(req: Requirement, value: str | None) -> bool:
    """Whether a label value (None = label absent) satisfies one requirement."""
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if value is None:
        return False
    try:
        number = int(value)
    except ValueError:
        return False
    bound = int(req.values[0])
    return number > bound if op == "Gt" else number < bound


# --- raw shapes ------------------------------------------------------------------------------------


class _RawTaint(_Lenient):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    def to_taint(self) -> Taint:
        return Taint(key=self.key, value=self.value, effect=self.effect)


class _RawRequirement(_Lenient):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)
    min_values: int | None = Field(default=None, ge=1, le=50)

    @field_validator("values", mode="before")
    @classmethod
    def _strings(cls, v: Any) -> list[str]:
        return [str(x) for x in (v or [])]

    @model_validator(mode="after")
    def _shape(self) -> _RawRequirement:
        if self.operator == "In" and not self.values:
            raise ValueError(f"{self.key}: operator In needs at least one value")
        if self.operator in ("Gt", "Lt") and (len(self.values) != 1 or not self.values[0].lstrip("-").isdigit()):
            raise ValueError(f"{self.key}: operator {self.operator} needs exactly one integer value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"{self.key}: operator {self.operator} takes no values")
        if self.min_values is not None and self.operator == "In" and len(self.values) < self.min_values:
            raise ValueError(f"{self.key}: minValues {self.min_values} is more than the {len(self.values)} values")
        return self

    def to_requirement(self) -> Requirement:
        return Requirement(key=self.key, operator=self.operator, values=tuple(self.values),
                           min_values=self.min_values)


class _NodeClassRef(_Lenient):
    name: str = Field(min_length=1)
    kind: str | None = None
    group: str | None = None
    api_version: str | None = None


class _RawDisruption(_Lenient):
    consolidation_policy: Literal["WhenEmpty", "WhenEmptyOrUnderutilized", "WhenUnderutilized"] = (
        "WhenEmptyOrUnderutilized")
    consolidate_after: str | None = None
    expire_after: str | None = None  # v1beta1 kept it here
    budgets: tuple[Budget, ...] | None = None


class _TemplateSpec(_Lenient):
    node_class_ref: _NodeClassRef
    taints: list[_RawTaint] = Field(default_factory=list)
    startup_taints: list[_RawTaint] = Field(default_factory=list)
    requirements: list[_RawRequirement] = Field(default_factory=list)
    kubelet: KubeletConfiguration | None = None  # v1beta1 (v1 moved it to the EC2NodeClass)
    expire_after: str | None = None
    termination_grace_period: str | None = None


class _TemplateMeta(_Lenient):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class _Template(_Lenient):
    metadata: _TemplateMeta = Field(default_factory=_TemplateMeta)
    spec: _TemplateSpec


class _V1Spec(_Lenient):
    template: _Template
    disruption: _RawDisruption = Field(default_factory=_RawDisruption)
    limits: dict[str, str | int | float] = Field(default_factory=dict)
    weight: int | None = Field(default=None, ge=0, le=100)
    replicas: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _static(self) -> _V1Spec:
        if self.replicas is None:
            return self
        other = sorted(k for k in self.limits if k != "nodes")
        if other:
            raise ValueError(f"limits: only 'limits.nodes' is supported on static NodePools (replicas is set); "
                             f"remove {', '.join(other)}")
        if self.weight is not None:
            raise ValueError("weight: 'weight' is not supported on static NodePools (replicas is set); remove it")
        return self


class _ProviderRef(_Lenient):
    name: str = Field(min_length=1)


class _Consolidation(_Lenient):
    enabled: bool = False


class _Limits(_Lenient):
    resources: dict[str, str | int | float] = Field(default_factory=dict)


class _V1Alpha5Spec(_Lenient):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    taints: list[_RawTaint] = Field(default_factory=list)
    startup_taints: list[_RawTaint] = Field(default_factory=list)
    requirements: list[_RawRequirement] = Field(default_factory=list)
    limits: _Limits = Field(default_factory=_Limits)
    weight: int = Field(default=0, ge=0, le=100)
    provider_ref: _ProviderRef | None = None
    provider: dict[str, Any] | None = None
    kubelet_configuration: KubeletConfiguration | None = None
    ttl_seconds_after_empty: int | None = Field(default=None, ge=0)
    ttl_seconds_until_expired: int | None = Field(default=None, ge=0)
    consolidation: _Consolidation | None = None

    @model_validator(mode="after")
    def _checks(self) -> _V1Alpha5Spec:
        if self.provider is not None:
            raise ValueError("provider (inline AWS settings) is not supported; move it to an AWSNodeTemplate "
                             "and reference it with providerRef")
        if self.ttl_seconds_after_empty is not None and self.consolidation and self.consolidation.enabled:
            raise ValueError("ttlSecondsAfterEmpty and consolidation.enabled are mutually exclusive")
        return self


# --- conversion ------------------------------------------------------------------------------------


def default_requirements(requirements: Iterable[Requirement]) -> tuple[Requirement, ...]:
    """Karpenter's defaults for keys a NodePool leaves open: linux, amd64, on-demand, and instance
    categories c/m/r of generation > 2 unless the NodePool already narrows instance shape."""
    reqs = list(requirements)
    keys = {r.key for r in reqs}
    if OS_LABEL not in keys:
        reqs.append(Requirement(OS_LABEL, "In", ("linux",)))
    if ARCH_LABEL not in keys:
        reqs.append(Requirement(ARCH_LABEL, "In", ("amd64",)))
    if CAPACITY_TYPE_LABEL not in keys:
        reqs.append(Requirement(CAPACITY_TYPE_LABEL, "In", ("on-demand",)))
    if not keys & INSTANCE_SHAPE_KEYS:
        reqs.append(Requirement(CATEGORY_LABEL, "In", ("c", "m", "r")))
        reqs.append(Requirement(GENERATION_LABEL, "Gt", ("2",)))
    return tuple(reqs)


def _limits(raw: Mapping[str, str | int | float]) -> dict[str, int]:
    try:
        return res.parse_resource_list(raw)
    except (QuantityError, ValueError) as exc:
        raise ValueError(f"limits: {exc}") from exc


def _budgets(raw: tuple[Budget, ...] | None) -> tuple[Budget, ...]:
    return (Budget(),) if raw is None else raw


def _from_v1(name: str, spec: Mapping[str, Any], *, api: str) -> NodePool:
    parsed = _V1Spec.model_validate(spec)
    tspec = parsed.template.spec
    d = parsed.disruption
    policy: ConsolidationPolicy = ("WhenEmpty" if d.consolidation_policy == "WhenEmpty"
                                   else "WhenEmptyOrUnderutilized")
    default_after = "0s" if api.endswith("/v1") else None
    consolidate_after = parse_duration(d.consolidate_after or default_after, field="disruption.consolidateAfter")
    if d.consolidate_after is None and policy == "WhenEmpty" and not api.endswith("/v1"):
        consolidate_after = 0
    expire = tspec.expire_after or d.expire_after or "720h"
    reqs = tuple(r.to_requirement() for r in tspec.requirements)
    return NodePool(
        name=name, weight=parsed.weight or 0, labels=parsed.template.metadata.labels,
        annotations=parsed.template.metadata.annotations,
        taints=tuple(t.to_taint() for t in tspec.taints),
        startup_taints=tuple(t.to_taint() for t in tspec.startup_taints),
        requirements=default_requirements(reqs), limits=_limits(parsed.limits),
        node_class_ref=tspec.node_class_ref.name, kubelet=tspec.kubelet,
        disruption=Disruption(
            consolidation_policy=policy, consolidate_after=consolidate_after,
            expire_after=parse_duration(expire, field="expireAfter"), budgets=_budgets(d.budgets),
        ),
        termination_grace_period=parse_duration(tspec.termination_grace_period, field="terminationGracePeriod"),
        replicas=parsed.replicas,
    )


def _from_v1alpha5(name: str, spec: Mapping[str, Any]) -> NodePool:
    """Provisioner: TTLs become the disruption block, providerRef the nodeClassRef."""
    p = _V1Alpha5Spec.model_validate(spec)
    if p.ttl_seconds_after_empty is not None:
        disruption = Disruption(consolidation_policy="WhenEmpty", consolidate_after=p.ttl_seconds_after_empty,
                                expire_after=p.ttl_seconds_until_expired)
    elif p.consolidation and p.consolidation.enabled:
        disruption = Disruption(consolidation_policy="WhenEmptyOrUnderutilized", consolidate_after=0,
                                expire_after=p.ttl_seconds_until_expired)
    else:
        # A Provisioner without either setting never removed nodes on its own.
        disruption = Disruption(consolidation_policy="WhenEmpty", consolidate_after=None,
                                expire_after=p.ttl_seconds_until_expired)
    reqs = tuple(r.to_requirement() for r in p.requirements)
    return NodePool(
        name=name, weight=p.weight, labels=p.labels, annotations=p.annotations,
        taints=tuple(t.to_taint() for t in p.taints),
        startup_taints=tuple(t.to_taint() for t in p.startup_taints),
        requirements=default_requirements(reqs), limits=_limits(p.limits.resources),
        node_class_ref=p.provider_ref.name if p.provider_ref else "default",
        kubelet=p.kubelet_configuration, disruption=disruption,
    )


def parse_node_pool(obj: Mapping[str, Any]) -> NodePool:
    """Validate one NodePool / Provisioner manifest; raise ConfigError naming object and field."""
    kind, api, name, subject, spec = manifest_header(obj, default_kind="NodePool", default_api="karpenter.sh/v1")
    try:
        if kind == "Provisioner" or api.endswith("/v1alpha5"):
            return _from_v1alpha5(name, spec)
        if kind != "NodePool":
            raise ConfigError(f"{subject}: kind must be NodePool or Provisioner")
        if api not in ("karpenter.sh/v1", "karpenter.sh/v1beta1"):
            raise ConfigError(f"{subject}: apiVersion {api!r} is not karpenter.sh/v1 or v1beta1")
        return _from_v1(name, spec, api=api)
    except ValidationError as exc:
        raise describe_validation_error(subject, exc, path_prefix="spec.") from exc
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{subject}: spec.{exc}") from exc


def parse_node_pools(objs: Iterable[Mapping[str, Any]]) -> list[NodePool]:
    """Parse all NodePools; duplicate names are an error. Returned highest weight first, then by name."""
    out: dict[str, NodePool] = {}
    for obj in objs:
        pool = parse_node_pool(obj)
        if pool.name in out:
            raise ConfigError(f"NodePool {pool.name}: defined twice")
        out[pool.name] = pool
    return sorted(out.values(), key=lambda p: (-p.weight, p.name))
