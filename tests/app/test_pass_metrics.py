"""The pass's metrics whose volume would grow with the pods: PodToLaunchSeconds is one EMF document's worth of
values per pass (at most 100, order statistics at evenly spaced ranks), however many pods the pass launched for,
and any percentile of them stays that percentile of every pod's wait within one rank in a hundred."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from autoscaler.app.pass_metrics import POD_TO_LAUNCH_VALUES, emit_pass_metrics, quantile_sample
from autoscaler.app.pass_report import GroupOutcome, PassResult
from autoscaler.domain.fleet import LaunchedInstance
from autoscaler.domain.objects import pod_from_dict
from autoscaler.domain.plan import Launch, Plan, PlanInput
from autoscaler.metrics_catalog import RecordingSink
from tests.kube_objects import pod


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def test_a_few_values_are_sent_as_they_are() -> None:
    assert quantile_sample([3.0, 1.0, 2.0], 100) == [1.0, 2.0, 3.0]
    assert quantile_sample([], 100) == []


@pytest.mark.parametrize("count", [101, 1_000, 50_000])
def test_many_values_keep_their_percentiles_within_a_rank_in_a_hundred(count: int) -> None:
    rng = random.Random(count)
    values = [rng.expovariate(1 / 30) for _ in range(count)]
    sample = quantile_sample(values, 100)
    assert len(sample) == 100 and sample == sorted(sample)
    for share in (0.5, 0.9, 0.99):
        got = _percentile(sample, share)
        assert _percentile(values, share - 0.01) <= got <= _percentile(values, share + 0.01)
    assert min(values) <= sample[0] and sample[-1] <= max(values)


def test_a_pass_launching_for_50k_pods_sends_one_documents_worth_of_pod_to_launch_values() -> None:
    base = pod_from_dict(pod("p-0"))
    pods = {f"default/p-{i}": replace(base, name=f"p-{i}", created_at=1000.0 + i % 600) for i in range(50_000)}
    keys = tuple(pods)
    launch = Launch(node_pool="default", node_class="default", capacity_type="on-demand", zones=("us-east-1a",),
                    instance_types=("m5.large",), pods=keys, labels={}, taints=(), startup_taints=(),
                    hourly_price=0.1, capacity_types=("on-demand",))
    group = GroupOutcome(claim_id="c", launch=launch, count=1, pods=keys,
                         launched=[LaunchedInstance("i-1", "m5.large", "us-east-1a", "on-demand", "c")])
    result = PassResult(reason="scheduled", dry_run=False, plan=Plan(launches=[launch]), groups=[group])
    sink = RecordingSink()
    emit_pass_metrics(sink, result=result, snap=PlanInput(node_pools=[], node_classes={}, pods=[]), plan_seconds=0.1,
                      owned=None, pods=pods, node_pools=[], prices_stale=False, now=2000.0)
    sent = [v for name, v, _ in sink.points if name == "PodToLaunchSeconds"]
    assert len(sent) == POD_TO_LAUNCH_VALUES == 100
    waits = [2000.0 - p.created_at for p in pods.values()]
    assert _percentile(waits, 0.89) <= _percentile(sent, 0.9) <= _percentile(waits, 0.91)
