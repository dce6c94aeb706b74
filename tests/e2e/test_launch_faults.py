"""No double launch under the faults EC2 and Lambda really produce: a lost CreateFleet answer (once and
always), DescribeInstances lagging CreateFleet across containers, a pass killed right before or right
after CreateFleet, and two passes at once. The node claims in DynamoDB (moto) are the record; EC2's
client-token idempotency is the strict stand-in ``simulator.ec2_tokens`` (moto launches again on every
request, which would forgive exactly the double launch the token prevents)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from autoscaler.adapters.clock import SystemClock
from autoscaler.app.pass_report import LaunchFailureKind
from autoscaler.domain.claims import LAUNCH_SETTLE_SECONDS
from autoscaler.domain.keys import NODECLAIM_TAG
from autoscaler.metrics_catalog import RecordingSink
from simulator.local import CLAIMS_TABLE, LocalCluster, inflate_pod
from tests.e2e.test_provisioner import count_create_fleet

pytestmark = pytest.mark.e2e


class Killed(BaseException):
    """The Lambda runtime stopping the function (timeout, out of memory): nothing after it runs."""


@dataclass
class ShiftedClock(SystemClock):
    """Real time plus ``shift`` seconds: lets a test be "a minute later" without waiting."""

    shift: float = 0.0

    def now(self) -> float:
        return time.time() + self.shift

    def monotonic(self) -> float:
        return time.monotonic() + self.shift


def hide_from_describe(env: LocalCluster) -> set[str]:
    """DescribeInstances does not list instances launched from now on until the returned set is cleared."""
    hidden: set[str] = set()

    def launched(parsed: dict[str, Any], **_: Any) -> None:
        hidden.update(i for inst in parsed.get("Instances", ()) for i in inst.get("InstanceIds", ()))

    def lag(parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", ()):
            reservation["Instances"] = [i for i in reservation["Instances"] if i["InstanceId"] not in hidden]

    env.session.events.register("after-call.ec2.CreateFleet", launched)
    env.session.events.register("after-call.ec2.DescribeInstances", lag)
    return hidden


def once(event: str, env: LocalCluster) -> Callable[[], int]:
    """Kill the pass at ``event`` (a botocore event of CreateFleet) the first time it fires."""
    fired = [0]

    def kill(**_: Any) -> None:
        if not fired[0]:
            fired[0] += 1
            raise Killed(event)

    env.session.events.register(event, kill)
    return lambda: fired[0]


def stored_claims(env: LocalCluster) -> list[dict[str, Any]]:
    db = env.session.client("dynamodb")
    return [i for p in db.get_paginator("scan").paginate(TableName=CLAIMS_TABLE) for i in p["Items"]]


def live(env: LocalCluster) -> list[str]:
    return sorted(i.instance_id for i in env.instances() if i.state not in ("terminated", "shutting-down"))


def test_a_lost_answer_is_resent_with_its_token_and_launches_nothing_twice(local: LocalCluster) -> None:
    # GIVEN EC2 launches for the first CreateFleet but its answer is lost (botocore resends)
    calls = count_create_fleet(local)
    local.runtime()
    local.tokens.lose_responses(1)
    local.scale("inflate", 5)
    # WHEN one pass runs
    result = local.invoke_provisioner()["passes"][0]
    # THEN the resend carried the same token, EC2 answered with the fleet it had launched: 2 planned, 2 run
    assert local.tokens.replayed == 1 and len(calls) == 1
    assert len(result["launched"]) == 2 == len(live(local)) and result["failures"] == []
    # and every claim holds its own instance
    claims = stored_claims(local)
    assert len(claims) == 2 and all('"state":"launched"' in c["doc"]["S"] for c in claims)


def test_every_answer_lost_leaves_claims_that_the_next_pass_adopts(local: LocalCluster) -> None:
    # GIVEN every CreateFleet answer is lost after EC2 acted (6 sends, the last times out)
    local.runtime()
    local.tokens.lose_responses(100)
    local.scale("inflate", 5)
    first = local.invoke_provisioner()["passes"][0]
    # THEN the pass says it does not know, launched nothing more than the first send, and kept its claims
    assert first["launched"] == [] and "ReadTimeoutError" in " ".join(first["failures"])
    assert local.tokens.sends == 6 and local.tokens.replayed == 5 and len(live(local)) == 2
    assert len(stored_claims(local)) == 2
    # WHEN a new container runs the next pass (answers arrive again)
    local.tokens.lose_responses(0)
    local.runtime()
    second = local.invoke_provisioner()["passes"][0]
    # THEN the instances are found by their claim tags: nothing is launched again
    assert second["launched"] == [] and second["nominated"] == 5 and second["claims"]["adopted"] == 2
    assert len(live(local)) == 2


def test_describe_lag_does_not_launch_again_from_a_new_container(local: LocalCluster) -> None:
    # GIVEN DescribeInstances does not list new instances yet
    hidden = hide_from_describe(local)
    calls = count_create_fleet(local)
    local.runtime()
    local.scale("inflate", 5)
    assert len(local.invoke_provisioner()["passes"][0]["launched"]) == 2 and hidden
    # WHEN another container (a replacement invoke, the next scheduled run) plans before EC2 lists them
    local.runtime()
    second = local.invoke_provisioner()["passes"][0]
    # THEN the claims are their capacity (wave 1 kept this only in the launching container's memory)
    assert second["launched"] == [] and second["nominated"] == 5 and len(calls) == 1


def test_a_pass_killed_after_create_fleet_is_resumed_with_the_same_tokens(local: LocalCluster) -> None:
    # GIVEN the pass dies right after EC2 launched (before it recorded anything) and EC2 lists nothing yet
    hidden = hide_from_describe(local)
    killed = once("after-call.ec2.CreateFleet", local)
    clock = ShiftedClock()
    local.runtime(clock=clock)
    local.scale("inflate", 5)
    with pytest.raises(Killed):
        local.invoke_provisioner()
    assert killed() == 1
    launched = set(hidden)
    assert len(launched) == 2
    # WHEN a new container runs within the settle time: the claims still count
    local.runtime(clock=clock)
    assert local.invoke_provisioner()["passes"][0]["launched"] == []
    # and a minute later, still unlisted, the launch is resumed with the same client tokens
    clock.shift = LAUNCH_SETTLE_SECONDS + 1
    local.runtime(clock=clock)
    third = local.invoke_provisioner()["passes"][0]
    # THEN EC2 answers with the instances it launched: the claims get them and no new instance exists
    assert local.tokens.replayed >= 1 and sorted(third["claims"]["resumed"]) == sorted(launched)
    assert third["launched"] == [] and third["nominated"] == 5
    hidden.clear()
    assert set(live(local)) == launched


def test_a_pass_killed_before_create_fleet_is_launched_once_by_the_next(local: LocalCluster) -> None:
    # GIVEN the pass recorded its claims and died before CreateFleet was sent
    killed = once("before-send.ec2.CreateFleet", local)
    clock = ShiftedClock()
    local.runtime(clock=clock)
    local.scale("inflate", 5)
    with pytest.raises(Killed):
        local.invoke_provisioner()
    assert killed() == 1 and live(local) == [] and len(stored_claims(local)) == 2
    # WHEN the next pass runs within the settle time, it waits (the dying pass might still be launching)
    local.runtime(clock=clock)
    assert local.invoke_provisioner()["passes"][0]["launched"] == [] and live(local) == []
    # and once the claims are stale it resumes them: exactly the planned nodes, once
    clock.shift = LAUNCH_SETTLE_SECONDS + 1
    local.runtime(clock=clock)
    third = local.invoke_provisioner()["passes"][0]
    assert len(third["claims"]["resumed"]) == 2 and len(live(local)) == 2
    assert {i.tags[NODECLAIM_TAG] for i in local.instances()} <= {
        c["id"]["S"].removeprefix("claim#") for c in stored_claims(local)}
    assert local.invoke_provisioner()["passes"][0]["launched"] == [] and len(live(local)) == 2


def test_a_pass_that_cannot_get_the_launch_lease_plans_but_does_not_launch(local: LocalCluster) -> None:
    # GIVEN another provisioner pass holds the cluster's launch lease
    rt = local.runtime()
    assert rt.claims.acquire_lease("other-pass", now=time.time(), seconds=60)
    local.scale("inflate", 5)
    blocked = local.invoke_provisioner()["passes"][0]
    # THEN this pass plans, launches nothing and says why
    assert blocked["launched"] == [] and live(local) == []
    assert "lease" in blocked["blocked"] and "launching skipped" in blocked["summary"]
    # WHEN the lease is released, the next pass launches
    rt.claims.release_lease("other-pass")
    assert len(local.invoke_provisioner()["passes"][0]["launched"]) == 2


def test_no_claim_store_no_launch(local: LocalCluster) -> None:
    # GIVEN the claims table cannot be reached (deleted, throttled away, no permission)
    calls = count_create_fleet(local)
    local.runtime()
    local.session.client("dynamodb").delete_table(TableName=CLAIMS_TABLE)
    local.scale("inflate", 5)
    result = local.invoke_provisioner()["passes"][0]
    # THEN nothing is launched without its durable record, and the pass says so
    assert result["launched"] == [] and calls == [] and "claim store is unavailable" in result["blocked"]


def test_a_failing_lifecycle_sweep_and_event_recording_are_counted_and_the_pass_goes_on(local: LocalCluster) -> None:
    # GIVEN a pass launched, the kubelet registered the nodes (with the registration taint), and then the
    # Kubernetes API refuses every Event and the lifecycle sweep's node patches
    local.runtime()
    local.scale("inflate", 5)
    local.invoke_provisioner()
    local.register_nodes(bind=False)
    local.scale("inflate", 12)  # 7 more pods: the next pass launches and records Events
    local.kube.inject_error("/events", 403, count=100, method="POST")
    local.kube.inject_error("/nodes/", 403, count=100, method="PATCH")
    sink = RecordingSink()
    local.runtime(sink=sink)
    result = local.invoke_provisioner()["passes"][0]
    # THEN the launch still happened, and each isolated failure is a metric by stage
    assert result["launched"]
    stages = {d["Stage"]: v for n, v, d in sink.points if n == "PassErrors"}
    assert stages["events"] >= 5 and stages["lifecycle"] == 2  # an Event per new pod; a patch per registering node


def test_one_describe_instances_listing_per_pass_in_pages(local: LocalCluster) -> None:
    sent: list[str] = []
    local.session.events.register("before-send.ec2.DescribeInstances",
                                  lambda request, **_: sent.append(str(request.body)))
    local.runtime()
    local.scale("inflate", 5)
    local.invoke_provisioner()
    # gather and lifecycle share one listing, asked for in pages of 1,000
    assert len(sent) == 1 and "MaxResults=1000" in sent[0]


def test_node_groups_launch_in_parallel_and_not_after_the_deadline(local: LocalCluster) -> None:
    # GIVEN pods pinned to three zones: three node groups, three CreateFleet calls
    windows: list[tuple[float, float]] = []
    lock = threading.Lock()

    def slow(**_: Any) -> None:
        start = time.monotonic()
        time.sleep(0.4)  # EC2 takes ~1.5 s per CreateFleet
        with lock:
            windows.append((start, time.monotonic()))

    local.session.events.register("before-send.ec2.CreateFleet", slow)
    rt = local.runtime()
    for n, zone in enumerate(("us-east-1a", "us-east-1b", "us-east-1c")):
        pod = inflate_pod(f"zonal-{n}", app=f"zonal-{n}", cpu="2")
        pod["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": zone}
        local.kube.store.create("pods", pod)
    provisioner = _service(rt)
    result = provisioner.run_pass()
    assert len(result.groups) >= 3 and len(windows) == len(result.groups)
    overlapping = max(sum(1 for s, e in windows if s < t < e) for t in (s + 0.01 for s, _ in windows))
    assert overlapping >= 2
    # WHEN the invocation is about to end: nothing starts, the pods are planned again next time
    local.scale("late", 3, cpu="2")
    before = len(windows)
    late = provisioner.run_pass(deadline=rt.clock.monotonic() + 1.0)
    assert len(windows) == before and late.groups and all(
        g.failure is not None and g.failure.kind is LaunchFailureKind.DEFERRED for g in late.groups)
    assert not any(c.pods and c.pods[0].startswith("default/late") for c in local.runtime_claims())


def _service(rt: Any) -> Any:
    from autoscaler.handlers.provisioner import provisioner_for

    return provisioner_for(rt, dry_run=False)


def test_pod_events_are_rate_limited_and_the_answer_is_bounded(local: LocalCluster) -> None:
    # GIVEN 250 pods no NodePool can place (500 CPU each)
    local.runtime()
    local.scale("huge", 250, cpu="500")
    first = local.invoke_provisioner()["passes"][0]
    # THEN one burst of Events goes out (warnings), the rest is counted, and the answer stays bounded
    failed = [e for e in local.kube.store.objects("events") if e.get("reason") == "FailedScheduling"]
    on_pods = [e for e in failed if e["involvedObject"]["kind"] == "Pod"]
    assert len(on_pods) == 100 and first["eventsSuppressed"] == 150
    # and the pods left out are summed up in one Event on their controller (kubectl describe replicaset)
    summary = [e for e in failed if e["involvedObject"]["kind"] != "Pod"]
    assert len(summary) == 1 and summary[0]["type"] == "Warning"
    owner = summary[0]["involvedObject"]
    assert owner["kind"] == "ReplicaSet" and owner["name"].startswith("huge") and owner["apiVersion"] == "apps/v1"
    assert summary[0]["message"].startswith("150 pods of this ReplicaSet had no FailedScheduling Event")
    assert first["unschedulableCount"] == 250 and len(first["unschedulable"]) == 200
    assert "150 pod Event(s) left out by the rate limit" in first["summary"] and len(first["summary"]) < 2000
    # and a pass right after sends no Event twice for the same pod and message
    local.invoke_provisioner()
    again = [e for e in local.kube.store.objects("events") if e.get("reason") == "FailedScheduling"]
    names = [e["involvedObject"]["name"] for e in again]
    assert len(names) == len(set(names))  # the controller's summary too: once per 10 minutes
