"""The scenario file (YAML): which cluster file, the initial workloads, a timeline of actions and the
assertions the run must meet. ``simulator/scenarios/*.yaml`` are the shipped ones; the format::

    name: inflate
    description: the getting-started guides' inflate 0 -> 5 -> 0
    cluster: ../../clusters/demo.yaml     # relative to this file; moved to us-east-1 (the bundled prices)
    config: {nodePools: [...]}            # top-level keys replacing the cluster file's
    until: 15m
    provisioner: {mode: watch}            # or scheduled; default and batching window from the cluster file
    settings: {bootSeconds: 30, readySeconds: 10, podStartSeconds: 3, scoring: LeastAllocated}
    initial:
      deployments: [{name: inflate, replicas: 0, cpu: "1"}]   # or template: {metadata, spec}
      objects: [<DaemonSet, PodDisruptionBudget, ... manifests>]
      reservations: [{instanceType: m5.xlarge, zone: us-east-1a, count: 2, tags: {purpose: ml}}]
    timeline:
      - {at: 1m, scale: {deployment: inflate, replicas: 5}}
      - {at: 2m, apply: <manifest>}
      - {at: 3m, delete: {kind: Deployment, name: inflate}}
      - {at: 4m, shrinkNodeGroup: {name: mng, size: 2}}   # initial.nodeGroups: [{name: mng, size: 3}]
      # initial.karpenterNodes: [{nodePool: default, version: v1, instanceType: m5.large, count: 2}]
      - {at: 5m, interrupt: {count: 2, nodePool: default}}  # FIS: warning now, reclaimed 2 min later
      - {at: 6m, interrupt: {count: 1, rebalance: true}}     # a rebalance recommendation (no reclaim)
      - {at: 6m, scheduledChange: {count: 2, startIn: 10m}}  # AWS Health: retirement of 2 instances in 10 min
      - {at: 7m, stopKubelet: {count: 1}}                    # a node's kubelet stops reporting (NotReady)
      - {at: 8m, newAmi: {name: al2023-v2, coldStart: true}} # a new AMI behind al2023@latest
      - {at: 6m, load: {deployment: web, cpu: 4}}   # cores burnt by clients (initial.hpas scale on it)
    assertions:
      - {metric: duplicate_launches, max: 0}
      - {metric: pending_pods, at: 5m, max: 0}     # a sampled series: its value at that time
      - {metric: nodes, at: end, equal: 0}

Durations are Kubernetes/Karpenter style (``90s``, ``15m``, ``2h``) or seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from autoscaler.config import ClusterConfig, parse_cluster_config
from autoscaler.domain.durations import duration_seconds
from simulator.local import PAUSE_IMAGE, REGION, REPO
from simulator.sim.kubelet import KubeletSettings
from simulator.sim.volumes import MAX_WAIT_FOR_UNMOUNT_SECONDS


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the file and the field."""


def seconds(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    if str(value) == "end":
        return float("inf")
    return float(duration_seconds(str(value)))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


_KUBELET = KubeletSettings()  # the kubelet's defaults live once, in kubelet.py


class Settings(_Model):
    boot_seconds: float = _KUBELET.boot_seconds
    ready_seconds: float = _KUBELET.ready_seconds
    startup_taint_seconds: float = _KUBELET.startup_taint_seconds
    pod_start_seconds: float = _KUBELET.pod_start_seconds
    pod_stop_seconds: float = _KUBELET.pod_stop_seconds
    node_monitor_grace_seconds: float = _KUBELET.node_monitor_grace_seconds
    node_delete_seconds: float = _KUBELET.node_delete_seconds
    pod_gc_seconds: float = _KUBELET.pod_gc_seconds
    taint_eviction_seconds: float = _KUBELET.taint_eviction_seconds
    scheduler_delay_seconds: float = 1.0
    # Persistent volumes (sim/volumes.py): an EBS volume created, attached and detached in this many seconds
    volume_provision_seconds: float = 5.0
    volume_attach_seconds: float = 10.0
    volume_detach_seconds: float = 10.0
    # After a node went uncleanly: kube-controller-manager's maxWaitForUnmountDuration before a force-detach
    volume_force_detach_seconds: float = MAX_WAIT_FOR_UNMOUNT_SECONDS
    scoring: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    # The Lambda schedules: by default the deployed ones (the cluster file's provisioner.schedule, or its
    # reaction's default, and disruption.schedule); a number here overrides the period.
    provisioner_period_seconds: float | None = None
    provisioner_offset_seconds: float = 0.0
    disruption_period_seconds: float | None = None
    disruption_offset_seconds: float = 30.0
    lambda_timeout_seconds: float | None = None  # default: each function's timeout from the cluster file
    sample_seconds: float = 10.0


class DeploymentSpec(_Model):
    name: str
    namespace: str = "default"
    replicas: int = 0
    cpu: str = "1"
    memory: str | None = None
    template: dict[str, Any] | None = None

    def pod_template(self) -> dict[str, Any]:
        if self.template is not None:
            template = dict(self.template)
            meta = dict(template.get("metadata") or {})
            meta.setdefault("labels", {"app": self.name})
            return {**template, "metadata": meta}
        requests = {"cpu": self.cpu, **({"memory": self.memory} if self.memory else {})}
        return {"metadata": {"labels": {"app": self.name}},
                "spec": {"containers": [{"name": self.name, "image": PAUSE_IMAGE, "resources": {"requests": requests}}],
                         "terminationGracePeriodSeconds": 0}}


class NodeGroupSpec(_Model):
    """An EKS managed node group present from the start (capacity that is not the autoscaler's)."""

    name: str
    instance_type: str = "m5.large"
    size: int = 3
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    labels: dict[str, str] = Field(default_factory=dict)


class ReservationSpec(_Model):
    """A capacity reservation in the account from the start (moto has none: simulator/ec2_reservations.py)."""

    instance_type: str
    zone: str
    count: int = Field(ge=0)
    tags: dict[str, str] = Field(default_factory=dict)
    capacity_block: bool = False
class KarpenterNodesSpec(_Model):
    """Nodes Karpenter launched before the migration: instances with Karpenter's tags (v1 ``karpenter.sh/nodepool``
    or v0.2x ``karpenter.sh/provisioner-name``), Ready Nodes with its labels and ``karpenter.sh/termination``
    finalizer. Karpenter itself is scaled to zero: nothing else manages them."""

    node_pool: str = "default"
    version: Literal["v1", "v0"] = "v1"
    instance_type: str = "m5.large"
    count: int = 2
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    labels: dict[str, str] = Field(default_factory=dict)


class JobSpec(_Model):
    """A Job: ``completions`` pods, ``parallelism`` at a time, each working ``runSeconds`` once Running."""

    name: str
    namespace: str = "default"
    completions: int = 1
    parallelism: int = 1
    run_seconds: float = 60.0
    cpu: str = "1"
    memory: str | None = None
    template: dict[str, Any] | None = None

    def pod_template(self) -> dict[str, Any]:
        return DeploymentSpec(name=self.name, cpu=self.cpu, memory=self.memory, template=self.template).pod_template()


class Initial(_Model):
    node_groups: list[NodeGroupSpec] = Field(default_factory=list)
    karpenter_nodes: list[KarpenterNodesSpec] = Field(default_factory=list)
    unavailable: list[Offering] = Field(default_factory=list)  # capacity errors from the start
    reservations: list[ReservationSpec] = Field(default_factory=list)
    hpas: list[HpaSpec] = Field(default_factory=list)
    deployments: list[DeploymentSpec] = Field(default_factory=list)
    objects: list[dict[str, Any]] = Field(default_factory=list)


class Target(_Model):
    """Which instances a fault hits: up to ``count`` of those matching every given field, lowest instance id
    first. ``node``: the Node's name; ``owner``: nodes running a pod of this workload (a Deployment,
    StatefulSet, Job or DaemonSet name); ``zone``: an availability zone; ``nodePool``: the autoscaler's pool."""

    count: int = 1
    node_pool: str | None = None
    node: str | None = None
    owner: str | None = None
    zone: str | None = None

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in (("node", self.node), ("owner", self.owner), ("zone", self.zone),
                                          ("nodePool", self.node_pool)) if v]
        return f" ({', '.join(parts)})" if parts else ""


class Interrupt(Target):
    """An AWS FIS spot interruption: the warning now, the reclaim two minutes later (``rebalance``: an
    EC2 Instance Rebalance Recommendation instead, and no reclaim)."""

    rebalance: bool = False


class Terminate(Target):
    """EC2 terminates instances without notice (an operator in the console, a host failure): no warning,
    no event, the kubelet just goes."""


class ScheduledChangeSpec(Target):
    """AWS Health announces an EC2 scheduled change (an instance retirement) for ``count`` of the
    autoscaler's instances (of ``nodePool`` when given), starting ``startIn`` from now; at the start EC2
    retires the ones still running."""

    start_in: float = 900.0

    @field_validator("start_in", mode="before")
    @classmethod
    def _start_in(cls, value: Any) -> float:
        return seconds(value)


class StopKubelet(Target):
    """The kubelets of ``count`` of the autoscaler's nodes (matching the target's fields) stop reporting
    while their instances keep running: the Nodes go Ready=Unknown, node repair's business."""


class NewAmi(_Model):
    """A new EKS-optimised AMI release: a new image (per architecture) named ``name``, published under the
    parameters ``al2023@latest`` (and the other ``@latest`` aliases) read. The functions see it when their
    AMI cache (one hour) expires; ``coldStart`` replaces their execution environments at once (as a deploy,
    or Lambda recycling them, would), so the next passes resolve it."""

    name: str = "eks-node-new"
    cold_start: bool = False


class HpaSpec(_Model):
    """A HorizontalPodAutoscaler on CPU utilisation (autoscaling/v2's Resource metric, the common case)."""

    deployment: str
    namespace: str = "default"
    min_replicas: int = 1
    max_replicas: int = 10
    target_cpu_utilization: int = 50


class Load(_Model):
    """The CPU (cores) a Deployment's clients make it burn from now on."""

    deployment: str
    cpu: float
    namespace: str = "default"

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: Any) -> float:
        text = str(value)
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


class Offering(_Model):
    """An offering EC2 has no capacity for (CreateFleet answers InsufficientInstanceCapacity)."""

    instance_type: str
    zone: str = "*"
    capacity_type: Literal["spot", "on-demand", "*"] = "*"

    def key(self) -> tuple[str, str, str]:
        return (self.instance_type, self.zone, self.capacity_type)


class Capacity(_Model):
    """From now on, exactly these offerings are unavailable (an empty list: capacity is back)."""

    unavailable: list[Offering] = Field(default_factory=list)


class ShrinkNodeGroup(_Model):
    name: str
    size: int


class Scale(_Model):
    """Scale a Deployment or a StatefulSet (give one of the two names)."""

    deployment: str | None = None
    stateful_set: str | None = None
    replicas: int
    namespace: str = "default"

    @model_validator(mode="after")
    def _one_target(self) -> Scale:
        if (self.deployment is None) == (self.stateful_set is None):
            raise ValueError("scale: name one of deployment or statefulSet")
        return self


class Delete(_Model):
    kind: str
    name: str
    namespace: str = "default"


class Step(_Model):
    at: float
    scale: Scale | None = None
    apply: dict[str, Any] | None = None
    deployment: DeploymentSpec | None = None  # create or replace a Deployment
    delete: Delete | None = None
    shrink_node_group: ShrinkNodeGroup | None = None
    interrupt: Interrupt | None = None
    terminate: Terminate | None = None
    scheduled_change: ScheduledChangeSpec | None = None
    stop_kubelet: StopKubelet | None = None
    new_ami: NewAmi | None = None
    load: Load | None = None
    capacity: Capacity | None = None
    node_pools: list[dict[str, Any]] | None = None  # the cluster file's nodePools from now on (kubectl apply)
    job: JobSpec | None = None

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> float:
        return seconds(value)

    @model_validator(mode="after")
    def _one_action(self) -> Step:
        actions = [a for a in (self.scale, self.apply, self.deployment, self.delete, self.shrink_node_group,
                               self.interrupt, self.terminate, self.scheduled_change, self.stop_kubelet,
                               self.new_ami, self.load, self.capacity, self.node_pools, self.job)
                   if a is not None]
        if len(actions) != 1:
            raise ValueError("each timeline step needs exactly one of scale, apply, deployment, delete, "
                             "shrinkNodeGroup, interrupt, terminate, scheduledChange, stopKubelet, newAmi, load, "
                             "capacity, nodePools, job")
        return self


EVENT_KINDS = ("launches", "terminations", "interruptions", "evictions", "disruptions")


class Never(_Model):
    """A bound no sample (or event count) may cross: ``above`` and/or ``below``."""

    above: float | None = None
    below: float | None = None


class RatioBounds(_Model):
    max: float | None = None
    min: float | None = None


class Assertion(_Model):
    """One check of a run. Forms (bounds: ``max``, ``min``, ``equal``)::

        {metric: duplicate_launches, equal: 0}                  # a summary number
        {metric: pending_pods, at: 5m, max: 0}                  # a sampled series at one time (end: the last)
        {metric: pending_pods, during: [5m, 12m], max: 0}       # every sample in a window
        {metric: evictions, during: [5h, 12h], equal: 0}        # events in a window (launches, terminations,
                                                                #  interruptions, evictions, disruptions)
        {metric: zone_skew.web, never: {above: 1}}              # no sample above 1 (within ``during`` if given)
        {metric: dollars, ratioToBaseline: {max: 1.0}}          # ours / the Cluster-Autoscaler baseline's
    """

    metric: str
    at: float | None = None  # a sampled series' value at this time (``end``: the last sample)
    during: tuple[float, float] | None = None
    never: Never | None = None
    ratio_to_baseline: RatioBounds | None = None
    max: float | None = None
    min: float | None = None
    equal: float | None = None

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> float | None:
        return None if value is None else seconds(value)

    @field_validator("during", mode="before")
    @classmethod
    def _during(cls, value: Any) -> tuple[float, float] | None:
        if value is None:
            return None
        if isinstance(value, dict):
            value = [value.get("from", 0), value.get("to", "end")]
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise ValueError("during: a window [from, to], e.g. [5m, 12m] or [1h, end]")
        start, end = seconds(value[0]), seconds(value[1])
        if end < start:
            raise ValueError(f"during: the window ends ({value[1]}) before it starts ({value[0]})")
        return (start, end)

    @model_validator(mode="after")
    def _one_form(self) -> Assertion:
        if self.at is not None and (self.during is not None or self.never is not None):
            raise ValueError(f"assertion on {self.metric}: 'at' is one time; use 'during' for a window")
        if self.ratio_to_baseline is not None and (self.at is not None or self.during is not None):
            raise ValueError(f"assertion on {self.metric}: ratioToBaseline compares whole-run summary numbers")
        if self.never is None and self.ratio_to_baseline is None and all(
                b is None for b in (self.max, self.min, self.equal)):
            raise ValueError(f"assertion on {self.metric}: give a bound (max, min, equal), never or ratioToBaseline")
        return self

    def check(self, value: float) -> bool:
        if self.ratio_to_baseline is not None:
            r = self.ratio_to_baseline
            return (r.max is None or value <= r.max) and (r.min is None or value >= r.min)
        ok = ((self.max is None or value <= self.max) and (self.min is None or value >= self.min)
              and (self.equal is None or value == self.equal))
        if self.never is not None:
            ok = ok and (self.never.above is None or value <= self.never.above) and (
                self.never.below is None or value >= self.never.below)
        return ok

    def describe(self) -> str:
        bounds = [f"<= {self.max:g}" if self.max is not None else "",
                  f">= {self.min:g}" if self.min is not None else "",
                  f"== {self.equal:g}" if self.equal is not None else ""]
        if self.never is not None:
            bounds += [f"never above {self.never.above:g}" if self.never.above is not None else "",
                       f"never below {self.never.below:g}" if self.never.below is not None else ""]
        if self.ratio_to_baseline is not None:
            r = self.ratio_to_baseline
            bounds += [f"ours/baseline <= {r.max:g}" if r.max is not None else "",
                       f"ours/baseline >= {r.min:g}" if r.min is not None else ""]
        where = "" if self.at is None else (" at end" if self.at == float("inf") else f" at {self.at:g}s")
        if self.during is not None:
            where = f" during {_clock(self.during[0])}-{_clock(self.during[1])}"
        return f"{self.metric}{where} {' and '.join(b for b in bounds if b)}"


def _clock(t: float) -> str:
    if t == float("inf"):
        return "end"
    h, rest = divmod(int(t), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


class Baseline(_Model):
    """The Cluster Autoscaler baseline (``--baseline``; how it is set up: simulator/sim/baseline.py)."""

    sizes: list[str] = Field(default_factory=lambda: ["large", "xlarge", "2xlarge"])
    expander: Literal["priority", "least-waste"] = "priority"
    max_size: int = 100
    scan_seconds: float = 10.0
    utilization: float = 0.5
    unneeded_seconds: float = 600.0
    delay_after_add_seconds: float = 600.0
    initial_backoff_seconds: float = 300.0
    max_backoff_seconds: float = 1800.0
    skip_nodes_with_system_pods: bool = True
    skip_nodes_with_local_storage: bool = True


class ProvisionerMode(_Model):
    """How pending pods reach the provisioner; each field defaults to the cluster file's ``provisioner``
    (``reaction``, ``batchIdleSeconds``, ``batchMaxSeconds``). ``scheduled``: only its schedule; ``watcher``
    (the watcher function wakes it) and ``watch`` (its own watch between runs): also a pass per batch of
    newly unschedulable pods, after the batching window (see simulator/sim/watch.py)."""

    mode: Literal["scheduled", "watch", "watcher"] | None = None
    batch_idle_seconds: float | None = None
    batch_max_seconds: float | None = None


DEFAULT_START = datetime(2025, 1, 6, tzinfo=UTC)  # a Monday, 00:00 UTC: the virtual clock's start unless pinned


class Scenario(_Model):
    name: str
    description: str = ""
    # The virtual clock's wall time at t=0 (ISO 8601, e.g. 2025-03-03T08:55:00Z): what disruption budget
    # schedules, Health event times and timestamps see. Fixed by default so every run is the same.
    start: datetime = DEFAULT_START
    seed: int = 0  # EC2 instance ids and node-claim names are drawn from it: the same seed, the same run
    cluster: str = "clusters/demo.yaml"
    config: dict[str, Any] = Field(default_factory=dict)
    until: float = 900.0
    settings: Settings = Field(default_factory=Settings)
    initial: Initial = Field(default_factory=Initial)
    timeline: list[Step] = Field(default_factory=list)
    assertions: list[Assertion] = Field(default_factory=list)
    baseline: Baseline = Field(default_factory=Baseline)
    provisioner: ProvisionerMode = Field(default_factory=ProvisionerMode)
    source: str = ""

    @field_validator("until", mode="before")
    @classmethod
    def _until(cls, value: Any) -> float:
        return seconds(value)

    @field_validator("start", mode="after")
    @classmethod
    def _start(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("start needs a time zone (e.g. 2025-03-03T08:55:00Z or +01:00)")
        return value.astimezone(UTC)

    def cluster_config(self) -> ClusterConfig:
        """The cluster file with ``config``'s top-level keys replacing its own, in us-east-1."""
        base = Path(self.source).parent if self.source else REPO
        path = (base / self.cluster).resolve()
        if not path.is_file():
            path = (REPO / self.cluster).resolve()
        if not path.is_file():
            raise ScenarioError(f"{self.source}: cluster: {self.cluster!r} not found (a path relative to the "
                                "scenario file or to the repository, e.g. clusters/demo.yaml)")
        data = yaml.safe_load(path.read_text())
        data.update(self.config)
        data["region"] = REGION  # the region the bundled prices cover
        return parse_cluster_config(data, source=f"{self.source} (cluster {self.cluster})")


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"scenario file {path} not found (see simulator/scenarios/*.yaml)")
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario is a mapping with name, timeline, assertions, ...")
    try:
        return Scenario.model_validate({**data, "source": str(path)})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ScenarioError(f"{path}: {problems}") from None
