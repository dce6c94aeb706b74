"""Pure parts of the provisioner: pod-key tags, grouping planned nodes into fleet requests, the
decision summary, the invocation payload and the watch window."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from autoscaler.app.pass_report import LaunchFailure, LaunchFailureKind
from autoscaler.app.provisioner import GroupOutcome, PassResult, group_launches
from autoscaler.domain.fleet import LaunchedInstance, in_flight_node, instance_from_ec2
from autoscaler.domain.keys import PODS_TAG_PREFIX
from autoscaler.domain.ownership import MAX_POD_TAGS, pod_tags, pods_from_tags
from autoscaler.domain.plan import Launch, Plan, Unschedulable
from autoscaler.handlers.provisioner import FINAL_PASS_RESERVE_SECONDS, parse_event, watch_seconds


@pytest.mark.parametrize("count", [0, 1, 5, 40, 200])
def test_pod_tags_round_trip_within_ec2_limits(count: int) -> None:
    keys = [f"namespace-{i % 7}/inflate-5d8f9c-{i:05d}" for i in range(count)]
    tags = pod_tags(keys)
    assert all(len(v) <= 256 for v in tags.values()) and len(tags) <= MAX_POD_TAGS
    assert list(pods_from_tags(tags)) == keys[:len(pods_from_tags(tags))]
    if count <= 150:
        assert list(pods_from_tags(tags)) == keys


def test_pods_from_tags_ignores_other_tags_and_orders_by_number() -> None:
    tags = {f"{PODS_TAG_PREFIX}1": "b/2", f"{PODS_TAG_PREFIX}0": "a/1 a/2", "Name": "x", f"{PODS_TAG_PREFIX}x": "z/9"}
    assert pods_from_tags(tags) == ("a/1", "a/2", "b/2")


def test_in_flight_instances_carry_their_pods() -> None:
    raw = {"InstanceId": "i-1", "InstanceType": "m5.large", "Placement": {"AvailabilityZone": "us-east-1a"},
           "State": {"Name": "pending"}, "Tags": [{"Key": k, "Value": v} for k, v in pod_tags(["d/a", "d/b"]).items()]}
    node = in_flight_node(instance_from_ec2(raw))
    assert node is not None and node.pod_keys == ("d/a", "d/b")


def _launch(pods: tuple[str, ...], *, types: tuple[str, ...] = ("m5.large",), ct: str = "spot") -> Launch:
    return Launch(node_pool="default", node_class="default", capacity_type=ct, zones=("us-east-1a",),
                  instance_types=types, pods=pods, labels={"intent": "apps"}, taints=(), startup_taints=(),
                  hourly_price=0.04, capacity_types=("spot",))


def test_identical_planned_nodes_share_one_fleet_request() -> None:
    groups = group_launches([_launch(("d/a",)), _launch(("d/b",)), _launch(("d/c",), types=("c5.large",)),
                             _launch(("d/d",), ct="on-demand")])
    assert [[ln.pods for ln in g] for g in groups] == [[("d/a",), ("d/b",)], [("d/c",)], [("d/d",)]]


def test_summary_names_what_was_seen_decided_launched_and_left() -> None:
    plan = Plan(launches=[_launch(("d/a", "d/b"))], existing={"d/c": "node-1"},
                unschedulable=[Unschedulable("d/e", "NodePool default limit reached (cpu)")], pending_pods=4)
    group = GroupOutcome(claim_id="default-abc", launch=plan.launches[0], count=1, pods=("d/a", "d/b"),
                         launched=[LaunchedInstance("i-1", "m5.large", "us-east-1a", "spot", "default-abc")],
                         prices={"i-1": 0.04})
    text = PassResult(reason="scheduled", dry_run=False, plan=plan, groups=[group]).summary()
    for part in ("4 pending pod(s)", "1 fit existing", "launched 1 node(s)", "m5.large us-east-1a spot",
                 "$0.0400/h", "default-abc", "1 unschedulable", "limit reached"):
        assert part in text
    dry = PassResult(reason="scheduled", dry_run=True, plan=plan,
                     groups=[GroupOutcome(claim_id="c", launch=plan.launches[0], count=1, pods=("d/a",))])
    assert "would launch 1 node(s)" in dry.summary()
    failed = GroupOutcome(claim_id="c", launch=plan.launches[0], count=2, pods=("d/a",),
                          failure=LaunchFailure(LaunchFailureKind.CONFIG, "x"))
    assert "failed: c: ConfigError: x" in PassResult(reason="s", dry_run=False, plan=plan, groups=[failed]).summary()


@pytest.mark.parametrize(("event", "kind", "nodes"), [
    ({}, "provisioner", []),
    ({"source": "schedule", "kind": "provisioner"}, "provisioner", []),
    ({"source": "interruption", "kind": "replacement", "nodes": ["n1"], "unavailable": [["m5.large", "a", "spot"]],
      "eventId": "e"}, "replacement", ["n1"]),
    ({"version": "0", "detail-type": "Scheduled Event"}, "provisioner", []),  # EventBridge's own envelope
])
def test_payloads(event: dict[str, Any], kind: str, nodes: list[str]) -> None:
    payload = parse_event(event)
    assert payload.kind == kind and payload.nodes == nodes


@pytest.mark.parametrize(("event", "field"), [
    ({"kind": "resize"}, "kind"),
    ({"kind": "replacement", "nodes": "n1"}, "nodes"),
    ({"kind": "replacement", "unavailable": [["m5.large", "a"]]}, "unavailable"),
])
def test_bad_payloads_name_the_field(event: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_event(event)


def _rt(*, watch: bool = True) -> Any:
    from autoscaler.config import ProvisionerConfig

    return SimpleNamespace(config=SimpleNamespace(provisioner=ProvisionerConfig(watch_mode=watch)))


@pytest.mark.parametrize(("remaining_ms", "enabled", "expected"), [
    (70_000, True, 50.0),   # the configured window: a minute minus the 10 s margin
    (40_000, True, 40.0 - FINAL_PASS_RESERVE_SECONDS),  # cut to the invocation's time
    (10_000, True, 0.0),
    (70_000, False, 0.0),
])
def test_watch_window(remaining_ms: int, enabled: bool, expected: float) -> None:
    context = SimpleNamespace(get_remaining_time_in_millis=lambda: remaining_ms)
    assert watch_seconds(_rt(), context, enabled=enabled) == pytest.approx(expected)


@pytest.mark.parametrize(("reaction", "event", "watch", "reason"), [
    # Given a watcher's wake-up: one pass, no watch, whatever the reaction
    ("watcher", {"source": "watcher", "kind": "provisioner", "reason": "3 pod(s) became unschedulable", "pods": 3},
     False, "watcher (3 pod(s) became unschedulable)"),
    ("watch", {"source": "watcher", "pods": 2}, False, "watcher (2 pod(s))"),
    # a scheduled run watches only with reaction: watch
    ("watcher", {"source": "schedule", "kind": "provisioner"}, False, "scheduled"),
    ("watch", {"source": "schedule", "kind": "provisioner"}, True, "scheduled"),
    ("scheduled", {"source": "schedule"}, False, "scheduled"),
    # the payload's override wins (local runs, the demo)
    ("watcher", {"source": "schedule", "watch": True}, True, "scheduled"),
])
def test_wake_ups_run_one_pass_and_only_reaction_watch_keeps_a_watch(
        reaction: str, event: dict[str, Any], watch: bool, reason: str) -> None:
    from autoscaler.config import ProvisionerConfig
    from autoscaler.handlers.provisioner import pass_reason, wants_watch

    # When the payload is parsed / Then the invocation's watch and its first pass's reason follow
    payload = parse_event(event)
    assert wants_watch(ProvisionerConfig.model_validate({"reaction": reaction}), payload) is watch
    assert pass_reason(payload) == reason
