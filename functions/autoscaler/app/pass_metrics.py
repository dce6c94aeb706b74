"""The metrics of one provisioner pass: what it saw, decided and launched, the fleet it manages (nodes and
cost by NodePool and capacity type, nodes draining and for how long, instances that never
registered) and its heartbeat. Every name and dimension comes from ``metrics_catalog``; dimensions are
bounded by the NodePools of the cluster file, the two capacity types and the EC2 offerings launched.

CloudWatch bills a custom metric for each hour it receives data, so on an idle cluster only what has
something to say is written: the heartbeat, the fleet (nodes, cost, NodePool usage) and
nothing for zero pending, unschedulable, nominated or draining pods and nodes (docs/cost.md). The
alarms on those treat missing data as not breaching, so a zero and no data read the same. Nothing the
dashboard can derive is a metric of its own: the spot share is ``Nodes`` by capacity type (infra/monitoring.py)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from autoscaler import metrics_catalog as mc
from autoscaler.app.pass_report import PassResult
from autoscaler.domain.allocatable import capacity
from autoscaler.domain.fleet import CloudInstance
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL
from autoscaler.domain.models import Pod
from autoscaler.domain.node_state import read_state
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import PlanInput
from autoscaler.metrics_catalog import MetricsSink

# An EMF document carries at most 100 values of one metric (Powertools writes a document when a metric reaches
# them), and CloudWatch computes the dashboard's p90 from the values it receives: a pass sends at most this many
# values of PodToLaunchSeconds, one document's worth, however many pods it launched for.
POD_TO_LAUNCH_VALUES = 100


def quantile_sample(values: Sequence[float], at_most: int) -> list[float]:
    """``values`` sorted when there are at most ``at_most`` of them; otherwise ``at_most`` order statistics at
    evenly spaced ranks (the midpoints of ``at_most`` equal slices of the sorted values), so any percentile of the
    sample is the same percentile of all values within ``1 / at_most`` of their rank."""
    ordered = sorted(values)
    if len(ordered) <= at_most:
        return ordered
    return [ordered[(2 * i + 1) * len(ordered) // (2 * at_most)] for i in range(at_most)]


def emit_pass_metrics(sink: MetricsSink, *, result: PassResult, snap: PlanInput, plan_seconds: float,
                      owned: Sequence[CloudInstance] | None, pods: Mapping[str, Pod], node_pools: Sequence[NodePool],
                      prices_stale: bool, now: float) -> None:
    """``owned``: our instances listed by the lifecycle sweep (None when the pass did not list them: its cost is
    then that of its registered nodes of ours and its in-flight capacity, as it saw them)."""
    plan = result.plan
    for metric, value in ((mc.PENDING_PODS, plan.pending_pods), (mc.UNSCHEDULABLE_PODS, len(plan.unschedulable)),
                          (mc.PODS_NOMINATED, len(plan.existing)), (mc.PRICES_STALE, 1 if prices_stale else 0)):
        if value:
            sink.emit(metric, value)
    if plan.pending_pods:
        sink.emit(mc.PLAN_SECONDS, plan_seconds)
    # Failures the pass isolated and went on from (each is also logged where it happened).
    for stage, count in (("lifecycle", len(result.lifecycle.errors) if result.lifecycle else 0),
                         ("claims", len(result.claims.errors)), ("events", result.events_failed)):
        if count:
            sink.emit(mc.PASS_ERRORS, count, Stage=stage)
    launched = Counter((g.launch.node_pool, i.instance_type, i.capacity_type, i.zone)
                       for g in result.groups for i in g.launched)
    for (pool, it, ct, zone), n in sorted(launched.items()):
        sink.emit(mc.NODES_LAUNCHED, n, NodePool=pool, InstanceType=it, CapacityType=ct, Zone=zone)
    _emit_failures(sink, result)
    waited = [max(0.0, now - pod.created_at) for g in result.groups if g.launched
              for pod in map(pods.get, g.pods) if pod is not None and pod.created_at]
    for seconds in quantile_sample(waited, POD_TO_LAUNCH_VALUES):
        sink.emit(mc.POD_TO_LAUNCH_SECONDS, seconds)
    _emit_usage(sink, snap, result, node_pools)
    _emit_fleet(sink, snap, now=now)
    if result.lifecycle is not None and result.lifecycle.timed_out:
        sink.emit(mc.INSTANCES_NEVER_REGISTERED, len(result.lifecycle.timed_out))
        pool_of = {i.instance_id: i.node_pool for i in owned or ()}
        for pool, n in sorted(Counter(pool_of.get(i) or "unknown" for i in result.lifecycle.timed_out).items()):
            sink.emit(mc.NODES_TERMINATED, n, NodePool=pool, Reason="NeverRegistered")
    _emit_cost(sink, snap, result, owned)
    sink.emit(mc.PASSES_SUCCEEDED, 1)


def _emit_failures(sink: MetricsSink, result: PassResult) -> None:
    failures: Counter[str] = Counter()
    for g in result.groups:
        if g.failure:
            failures[g.failure.reason] += g.count
        elif g.missing:
            # EC2's own reason beats our "nothing left to try", which only follows it.
            codes = ([e.code for e in g.errors if e.code != "NoOfferingsLeft"]
                     or [e.code for e in g.errors] or ["Unknown"])
            failures[Counter(codes).most_common(1)[0][0]] += g.missing
    for reason, n in sorted(failures.items()):
        sink.emit(mc.LAUNCH_FAILURES, n, Reason=reason)


def _emit_fleet(sink: MetricsSink, snap: PlanInput, *, now: float) -> None:
    """Our nodes (those with a NodePool label) by pool and capacity type, and the nodes cordoned or
    draining with the age of the oldest drain."""
    by_pool: Counter[tuple[str, str]] = Counter()
    draining, oldest = 0, 0.0
    for n in snap.nodes:
        pool = n.labels.get(NODEPOOL_LABEL)
        if not pool:
            continue
        by_pool[(pool, n.labels.get(CAPACITY_TYPE_LABEL) or "unknown")] += 1
        started = read_state(n.annotations).drain_started
        if n.unschedulable or started is not None:
            draining += 1
            if started is not None:
                oldest = max(oldest, now - started)
    for (pool, ct), count in sorted(by_pool.items()):
        sink.emit(mc.NODES, count, NodePool=pool, CapacityType=ct)
    if draining:
        sink.emit(mc.NODES_DRAINING, draining)
        sink.emit(mc.LONGEST_DRAIN_SECONDS, round(oldest, 1))


def _emit_cost(sink: MetricsSink, snap: PlanInput, result: PassResult,
               owned: Sequence[CloudInstance] | None) -> None:
    # ``owned`` was listed before this pass's launches: add them.
    price: dict[tuple[str, str, str], float] = {(o.instance_type, o.zone, o.capacity_type): o.price
                                                for o in snap.offerings}
    if owned is not None:
        known = {i.instance_id for i in owned}
        offerings = [(i.node_pool, i.instance_type, i.zone, str(i.capacity_type)) for i in owned]
    else:  # the pass's own view: our registered nodes by their labels, and its in-flight capacity
        known = {f.instance_id for f in snap.in_flight}
        offerings = [(pool, n.labels.get(INSTANCE_TYPE_LABEL, ""), n.zone or "",
                      n.labels.get(CAPACITY_TYPE_LABEL, ""))
                     for n in snap.nodes if (pool := n.labels.get(NODEPOOL_LABEL))]
        offerings += [(f.node_pool, f.instance_type, f.zone, f.capacity_type) for f in snap.in_flight]
    offerings += [(g.launch.node_pool, i.instance_type, i.zone, str(i.capacity_type)) for g in result.groups
                  for i in g.launched if i.instance_id not in known]
    by_pool: dict[tuple[str, str], float] = defaultdict(float)
    for pool, it, zone, ct in offerings:
        by_pool[(pool or "unknown", str(ct))] += price.get((it, zone, ct), 0.0)
    sink.emit(mc.MANAGED_HOURLY_COST, round(sum(by_pool.values()), 6))
    for (pool_name, capacity_type), cost in sorted(by_pool.items()):
        sink.emit(mc.HOURLY_COST, round(cost, 6), NodePool=pool_name, CapacityType=capacity_type)


def _emit_usage(sink: MetricsSink, snap: PlanInput, result: PassResult, node_pools: Sequence[NodePool]) -> None:
    types = {t.name: t for t in snap.instance_types}
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for n in snap.nodes:
        pool_label = n.labels.get(NODEPOOL_LABEL)
        if pool_label:
            for k, v in n.capacity.items():
                used[pool_label][k] += v
            used[pool_label]["nodes"] += 1
    extra = [(f.node_pool, f.instance_type) for f in snap.in_flight]
    extra += [(g.launch.node_pool, i.instance_type) for g in result.groups for i in g.launched]
    for pool_name, type_name in extra:
        it = types.get(type_name)
        if it is None:
            continue
        for k, v in capacity(it).items():
            used[pool_name][k] += v
        used[pool_name]["nodes"] += 1
    for pool in node_pools:
        for resource, limit in sorted(pool.limits.items()):
            if limit > 0:
                sink.emit(mc.NODE_POOL_USAGE, round(100.0 * used[pool.name][resource] / limit, 2),
                          NodePool=pool.name, Resource=resource)
