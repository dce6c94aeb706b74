"""The provisioner end to end: the real handler against moto (as a server) and the Kubernetes API
emulator, on the getting-started guides' ``inflate`` Deployment."""

from __future__ import annotations

import base64
import copy
import json
import logging
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from autoscaler.adapters.clock import SystemClock
from autoscaler.domain.keys import MANAGED_BY_TAG, NODECLAIM_TAG, NODEPOOL_TAG
from autoscaler.domain.models import UNREGISTERED_TAINT
from autoscaler.handlers.runtime import get_runtime
from autoscaler.metrics_catalog import RecordingSink
from simulator.local import Catalog, LocalCluster, on_demand_prices
from tests.adapters.aws.helpers import CapacityFault
from tests.e2e.conftest import make_local

pytestmark = pytest.mark.e2e


def count_create_fleet(env: LocalCluster) -> list[dict[str, Any]]:
    """Every CreateFleet request made by clients created from now on."""
    calls: list[dict[str, Any]] = []
    env.session.events.register("before-parameter-build.ec2.CreateFleet",
                                lambda params, **_: calls.append(copy.deepcopy(params)))
    return calls


def user_data(env: LocalCluster) -> str:
    ec2 = env.session.client("ec2")
    out = []
    for lt in ec2.describe_launch_templates()["LaunchTemplates"]:
        version = ec2.describe_launch_template_versions(LaunchTemplateId=lt["LaunchTemplateId"])
        for v in version["LaunchTemplateVersions"]:
            out.append(base64.b64decode(v["LaunchTemplateData"]["UserData"]).decode())
    return "\n".join(out)


def events_for(env: LocalCluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in env.kube.store.objects("events") if e.get("reason") == reason]


def test_inflate_scaled_to_five_launches_spot_once_then_registers(local: LocalCluster) -> None:
    calls = count_create_fleet(local)
    tagged: list[dict[str, Any]] = []
    local.session.events.register("before-parameter-build.ec2.CreateTags",
                                  lambda params, **_: tagged.append(copy.deepcopy(params)))
    swept: list[dict[str, Any]] = []  # the lifecycle step's listing of launch templates (by filter, not name)
    local.session.events.register("before-parameter-build.ec2.DescribeLaunchTemplates",
                                  lambda params, **_: swept.append(params) if "Filters" in params else None)
    sink = RecordingSink()
    local.runtime(sink=sink)
    local.scale("inflate", 5)

    # GIVEN 5 pending 1-CPU pods WHEN one scheduled pass runs THEN spot capacity for all 5 launches.
    first = local.invoke_provisioner()["passes"][0]
    assert first["pendingPods"] == 5 and first["unschedulable"] == [] and first["failures"] == []
    # At most the launch warm-up's one listing of the cluster's templates (CloudPort.warm_launch, on a worker
    # thread: it may or may not run before the launch needs a template); never the sweep's on top of it.
    assert len(swept) <= 1
    assert len(calls) == 1
    assert calls[0]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "spot"
    instances = local.instances()
    assert instances and len(instances) == len(first["launched"])
    assert {i.capacity_type for i in instances} == {"spot"}
    tags = instances[0].tags
    assert tags[NODEPOOL_TAG] == "default" and tags[MANAGED_BY_TAG] == "demo"
    assert tags["kubernetes.io/cluster/demo"] == "owned" and tags[NODECLAIM_TAG].startswith("default-")
    # One identity per instance, recorded in the claims table (not by a CreateTags per instance): its
    # own claim id and only the pods planned onto it; the instances carry the group's claim tag.
    assert len(instances) == 2 and not tagged
    claims = {c.instance_id: c for c in local.runtime_claims()}
    assert set(claims) == {i.instance_id for i in instances}
    assert len({c.claim_id for c in claims.values()}) == 2
    assert sorted(k for c in claims.values() for k in c.pods) == local.pending_pods()
    assert all(c.pods and len(c.pods) < 5 for c in claims.values())
    assert {i["claim"] for i in first["launched"]} == {c.claim_id for c in claims.values()}
    assert {i.tags[NODECLAIM_TAG] for i in instances} <= {c.claim_id for c in claims.values()}
    data = user_data(local)
    for expected in ("intent=apps", "karpenter.sh/capacity-type=spot", "karpenter.sh/nodepool=default",
                     "--register-with-taints=karpenter.sh/unregistered:NoExecute", "name: demo"):
        assert expected in data
    nominated = events_for(local, "Nominated")
    assert len(nominated) == 5
    claim_of = {key: c.claim_id for c in claims.values() for key in c.pods}
    for event in nominated:
        pod = f"{event['involvedObject']['namespace']}/{event['involvedObject']['name']}"
        assert f"nodeclaim/{claim_of[pod]} " in event["message"]
    assert sink.total("NodesLaunched", CapacityType="spot") == len(instances)
    assert sink.total("NodesLaunched", NodePool="default") == len(instances)
    assert sink.total("PassesSucceeded") == 1  # the heartbeat
    assert sink.total("HourlyCost", NodePool="default", CapacityType="spot") == sink.total("ManagedHourlyCost")
    assert sink.total("PendingPods") == 5
    usage = [v for n, v, d in sink.points if n == "NodePoolUsage" and d == {"NodePool": "default", "Resource": "cpu"}]
    assert usage and 0 < usage[-1] < 100  # an 8-vCPU-class node against a 1000-CPU limit
    assert sink.total("ManagedHourlyCost") > 0 and sink.total("PodToLaunchSeconds") >= 0

    # A second pass before the instances register launches nothing: they are capacity for those pods.
    second = local.invoke_provisioner()["passes"][0]
    assert second["launched"] == [] and second["nominated"] == 5 and len(calls) == 1
    # Unused launch templates are collected by the sweep (the first pass swept, but launched: never on a burst's
    # path), and the second pass, within SWEEP_SECONDS of it, takes its in-flight capacity from the claims:
    # still at most the warm-up's one listing
    assert len(swept) <= 1

    # The kubelet registers the nodes with karpenter.sh/unregistered:NoExecute: the pods cannot bind yet
    # (wave 1's harness bound them through the taint, hiding a second launch here). The registering
    # nodes are those pods' capacity: the pass launches nothing, and its lifecycle step lifts the taint.
    names = local.register_nodes()
    local_pods = local.pending_pods()
    assert len(local_pods) == 5
    third = local.invoke_provisioner()["passes"][0]
    assert third["launched"] == [] and len(calls) == 1
    assert sorted(local.schedule_pods()) == local_pods and local.pending_pods() == []
    assert local.invoke_provisioner()["passes"][0]["pendingPods"] == 0
    # The fleet gauges of that last pass: two spot nodes of the default pool; none draining and no pending
    # pod, so neither is written (CloudWatch bills each metric by the hour it receives data)
    before = len(sink.points)
    assert local.invoke_provisioner()["passes"][0]["pendingPods"] == 0
    idle = {n for n, _, _ in sink.points[before:]}
    nodes = [v for n, v, d in sink.points if n == "Nodes" and d == {"NodePool": "default", "CapacityType": "spot"}]
    assert nodes[-1] == 2
    assert {"PassesSucceeded", "ManagedHourlyCost", "Nodes", "HourlyCost", "NodePoolUsage"} <= idle
    assert not idle & {"PendingPods", "UnschedulablePods", "PodsNominated", "PlanSeconds", "NodesDraining",
                       "LongestDrainSeconds", "PricesStale"}
    node = local.kube.store.get("nodes", None, names[0])
    assert not any(t["key"] == UNREGISTERED_TAINT.key for t in node["spec"].get("taints") or ())
    assert node["metadata"]["labels"]["intent"] == "apps"
    assert local.invoke_provisioner()["passes"][0]["summary"].endswith("nothing to do")


def test_nodepool_limit_stops_launches_with_a_reason(moto_server: ThreadedMotoServer,
                                                     local_catalog: Catalog) -> None:
    from simulator.local import demo_config

    pools = copy.deepcopy(demo_config().node_pools)
    pools[0]["spec"]["limits"] = {"cpu": "2"}
    with make_local(moto_server, local_catalog, node_pools=pools) as env:
        calls = count_create_fleet(env)
        env.scale("inflate", 5)
        result = env.invoke_provisioner()["passes"][0]
        assert calls == [] and result["launched"] == []
        assert len(result["unschedulable"]) == 5
        assert all("limit" in u["reason"] for u in result["unschedulable"])
        assert "limit" in result["summary"]
        warnings = events_for(env, "FailedScheduling")
        assert len(warnings) == 5 and warnings[0]["type"] == "Warning"


def test_capacity_error_falls_back_to_on_demand(moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    from simulator.local import demo_config

    pools = copy.deepcopy(demo_config().node_pools)
    for req in pools[0]["spec"]["template"]["spec"]["requirements"]:
        if req["key"] == "karpenter.sh/capacity-type":
            req["values"] = ["spot", "on-demand"]
    with make_local(moto_server, local_catalog, node_pools=pools) as env:
        names = [i["InstanceType"] for i in local_catalog[0]]
        fault = CapacityFault(failing={(t, z): "InsufficientInstanceCapacity" for t in names
                                       for z in ("us-east-1a", "us-east-1b", "us-east-1c")},
                              only_capacity_type="spot")
        fault.install(SimpleNamespace(meta=SimpleNamespace(events=env.session.events)))
        sink = RecordingSink()
        rt = env.runtime(sink=sink)
        env.scale("inflate", 5)
        result = env.invoke_provisioner()["passes"][0]
        cts = [r["TargetCapacitySpecification"]["DefaultTargetCapacityType"] for r in fault.requests]
        assert cts[0] == "spot" and cts[-1] == "on-demand"
        assert result["launched"] and {i["capacityType"] for i in result["launched"]} == {"on-demand"}
        assert result["failures"] == []
        assert any(ct == "spot" for _, _, ct in rt.cloud.unavailable())
        # The decision log reports the launch, not the plan: on-demand at the on-demand price
        # (wave 1 logged the planned "spot $0.0382/h").
        od = on_demand_prices()
        for inst in result["launched"]:
            assert inst["hourlyPrice"] == pytest.approx(od[inst["instanceType"]])
            logged = f"{inst['instanceType']} {inst['zone']} on-demand ${od[inst['instanceType']]:.4f}/h"
            assert logged in result["summary"]
        assert " spot $" not in result["summary"]


def test_replacement_request_places_the_leaving_nodes_pods(local: LocalCluster) -> None:
    calls = count_create_fleet(local)
    local.runtime()
    local.scale("inflate", 3)
    local.invoke_provisioner()
    [node] = local.register_nodes()
    launched = local.instances()[0]
    assert len(calls) == 1

    # The interruption function asks for a replacement and says the offering is gone.
    result = local.invoke_provisioner({"source": "interruption", "kind": "replacement", "nodes": [node],
                                       "unavailable": [[launched.instance_type, launched.zone, "spot"]],
                                       "eventId": "evt-1"})["passes"][0]
    assert result["reason"].startswith("replacement (interruption evt-1")
    assert result["pendingPods"] == 3 and len(calls) == 2
    new = result["launched"]
    assert new and all((i["instanceType"], i["zone"]) != (launched.instance_type, launched.zone) for i in new)


def test_dry_run_plans_and_launches_nothing(local: LocalCluster) -> None:
    calls = count_create_fleet(local)
    local.runtime()
    local.scale("inflate", 5)
    result = local.invoke_provisioner({"dryRun": True})["passes"][0]
    assert result["dryRun"] and result["planned"] and result["launched"] == []
    assert "would launch" in result["summary"]
    assert calls == [] and local.instances() == [] and events_for(local, "Nominated") == []


def test_watch_mode_plans_again_for_pods_arriving_during_the_invocation(local: LocalCluster) -> None:
    calls = count_create_fleet(local)
    local.runtime()

    def arrive() -> None:
        time.sleep(1.0)
        local.scale("inflate", 2)

    threading.Thread(target=arrive, daemon=True).start()
    # 24 s remaining - 20 s kept for a last pass = a 4 s watch window (less the first pass).
    passes = local.invoke_provisioner(watch=True, remaining_ms=24_000)["passes"]
    assert passes[0]["pendingPods"] == 0
    assert len(passes) >= 2 and passes[1]["reason"].startswith("watch")
    assert sum(len(p["launched"]) for p in passes) >= 1 and len(calls) == 1


def test_replacement_requested_annotation_is_served_by_a_scheduled_pass(local: LocalCluster) -> None:
    calls = count_create_fleet(local)
    local.runtime()
    local.scale("inflate", 2)
    local.invoke_provisioner()
    [node] = local.register_nodes()
    assert local.invoke_provisioner()["passes"][0]["launched"] == []
    # The interruption function annotated the node, but its asynchronous invoke has not arrived yet.
    local.kube.store.patch("nodes", None, node, {"metadata": {"annotations": {
        "autoscaler.eks.aws/replacement-requested": "1700000000"}}})
    result = local.invoke_provisioner()["passes"][0]
    assert result["pendingPods"] == 2 and result["launched"] and len(calls) == 2


def test_a_pass_reads_the_cluster_once_even_when_it_finds_nodes_awaiting_replacement(local: LocalCluster) -> None:
    # GIVEN a node whose replacement was asked for (the annotation) but whose invoke has not arrived
    listings: list[dict[str, Any]] = []
    local.session.events.register("before-parameter-build.ec2.DescribeInstances",
                                  lambda params, **_: listings.append(params) if "Filters" in params else None)
    local.runtime()
    local.scale("inflate", 2)
    local.invoke_provisioner()
    [node] = local.register_nodes()
    local.kube.store.patch("nodes", None, node, {"metadata": {"annotations": {
        "autoscaler.eks.aws/replacement-requested": "1700000000"}}})
    before = len(listings)
    # WHEN a scheduled pass that sweeps (its container's last sweep is SWEEP_SECONDS old) finds it (its pods are
    # planned as leaving)
    get_runtime().warm.provisioners[False].swept_at = None
    result = local.invoke_provisioner()["passes"][0]
    # THEN it planned them from its one read: one listing of our instances, shared with the lifecycle sweep
    assert result["pendingPods"] == 2 and result["launched"]
    assert len(listings) - before == 1


def test_in_flight_capacity_keeps_its_nodepools_taints(moto_server: ThreadedMotoServer,
                                                       local_catalog: Catalog) -> None:
    from simulator.local import demo_config, inflate_pod

    pools = copy.deepcopy(demo_config().node_pools)
    dedicated = copy.deepcopy(pools[0])
    dedicated["metadata"]["name"] = "dedicated"
    dedicated["spec"]["weight"] = 100
    dedicated["spec"]["template"]["spec"]["taints"] = [{"key": "team", "value": "ml", "effect": "NoSchedule"}]
    with make_local(moto_server, local_catalog, node_pools=[dedicated, *pools]) as env:
        calls = count_create_fleet(env)
        env.runtime()
        tolerating = inflate_pod("ml-0", app="ml")
        tolerating["spec"]["tolerations"] = [{"key": "team", "operator": "Equal", "value": "ml",
                                              "effect": "NoSchedule"}]
        env.kube.store.create("pods", tolerating)
        first = env.invoke_provisioner()["passes"][0]
        assert first["planned"][0]["nodePool"] == "dedicated" and len(calls) == 1
        # A pod without the toleration must not be counted onto the dedicated in-flight node's spare room.
        env.scale("inflate", 1)
        second = env.invoke_provisioner()["passes"][0]
        assert [g["nodePool"] for g in second["planned"]] == ["default"] and len(calls) == 2


def test_a_bad_payload_is_logged_by_field_and_a_normal_pass_still_runs(
        local: LocalCluster, caplog: pytest.LogCaptureFixture) -> None:
    local.runtime()
    local.scale("inflate", 1)
    # The rejected payload's "watch": false goes with it, so leave no time for watch mode.
    answer = local.invoke_provisioner({"kind": "replacement", "nodes": "not-a-list"}, remaining_ms=20_000)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("provisioner payload rejected" in m and "nodes" in m for m in errors)
    first = answer["passes"][0]
    assert first["reason"] == "scheduled" and len(first["launched"]) == 1
    # The decision is logged as one line, with the structured detail alongside.
    [decision] = [r for r in caplog.records if hasattr(r, "decision")]
    assert decision.getMessage().startswith("scheduled pass: 1 pending pod(s): launched 1 node(s)")
    assert decision.decision["launched"][0]["capacityType"] == "spot"


def test_launch_failures_are_reported_and_counted_by_reason(moto_server: ThreadedMotoServer,
                                                            local_catalog: Catalog) -> None:
    with make_local(moto_server, local_catalog) as env:  # the demo pool allows spot only
        names = [i["InstanceType"] for i in local_catalog[0]]
        fault = CapacityFault(failing={(t, z): "InsufficientInstanceCapacity" for t in names
                                       for z in ("us-east-1a", "us-east-1b", "us-east-1c")})
        fault.install(SimpleNamespace(meta=SimpleNamespace(events=env.session.events)))
        sink = RecordingSink()
        env.runtime(sink=sink)
        env.scale("inflate", 5)
        result = env.invoke_provisioner()["passes"][0]
        assert result["launched"] == [] and result["failures"]
        assert "not launched" in result["failures"][0] and "InsufficientInstanceCapacity" in result["failures"][0]
        assert "failed:" in result["summary"]
        assert sink.total("LaunchFailures") >= 1
        assert {d["Reason"] for n, _, d in sink.points if n == "LaunchFailures"} == {"InsufficientInstanceCapacity"}
        assert env.instances() == [] and events_for(env, "Nominated") == []
        # each pod says why its node did not launch (kubectl describe pod), and that it is planned again
        failed = events_for(env, "LaunchFailed")
        assert len(failed) == 5 and all(e["type"] == "Warning" for e in failed)
        assert "InsufficientInstanceCapacity" in failed[0]["message"] and "next pass" in failed[0]["message"]
        # and its node claims are gone: nothing launched, so nothing is in flight for the next pass
        assert env.runtime_claims() == []


def test_describe_instances_lagging_create_fleet_does_not_launch_again(local: LocalCluster) -> None:
    # GIVEN DescribeInstances that does not show instances for a while after CreateFleet (EC2's
    # eventually consistent view; seconds in practice)
    calls = count_create_fleet(local)
    hidden: set[str] = set()

    def launched(parsed: dict[str, Any], **_: Any) -> None:
        hidden.update(i for inst in parsed.get("Instances", ()) for i in inst.get("InstanceIds", ()))

    def lag(parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", ()):
            reservation["Instances"] = [i for i in reservation["Instances"] if i["InstanceId"] not in hidden]

    local.session.events.register("after-call.ec2.CreateFleet", launched)
    local.session.events.register("after-call.ec2.DescribeInstances", lag)
    local.runtime()
    local.scale("inflate", 5)
    first = local.invoke_provisioner()["passes"][0]
    assert first["launched"] and hidden
    # WHEN the next pass runs before EC2 lists them (the next watch batch, a replacement invoke)
    second = local.invoke_provisioner()["passes"][0]
    # THEN the container's own record of its launches is their pods' capacity: nothing launches again
    assert second["launched"] == [] and second["nominated"] == 5 and len(calls) == 1
    hidden.clear()
    assert local.invoke_provisioner()["passes"][0]["launched"] == [] and len(calls) == 1


class _Journal:
    """Stands in for stdout and the decision logger: remembers each EMF document and log message in the
    order they were written (an order, never a wall-clock time: the machine may be busy)."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.entries.extend(("emf", json.loads(line)) for line in text.splitlines() if line.startswith('{"_aws"'))
        return len(text)

    def flush(self) -> None:
        pass

    def log(self, message: str) -> None:
        with self._lock:
            self.entries.append(("log", message))

    def heartbeats(self) -> list[int]:
        """Positions of the EMF documents carrying a pass's heartbeat (PassesSucceeded)."""
        with self._lock:
            return [i for i, (kind, doc) in enumerate(self.entries) if kind == "emf" and "PassesSucceeded" in doc]


class _JournalRecords(logging.Handler):
    def __init__(self, journal: _Journal) -> None:
        super().__init__()
        self.journal = journal

    def emit(self, record: logging.LogRecord) -> None:
        self.journal.log(record.getMessage())


WINDOW_S = 90.0


class _SkippableClock(SystemClock):
    """The real clock, which a test can move forward: the end of a watch window without waiting for it."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def skip(self, seconds: float) -> None:
        self.skipped += seconds

    def now(self) -> float:
        return super().now() + self.skipped

    def monotonic(self) -> float:
        return super().monotonic() + self.skipped


def _wait_for(condition: Any, what: str, *, timeout: float = 120.0) -> None:
    """Return once ``condition()`` holds; a generous bound (a loaded machine is slow, never wrong)."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.02)


def test_watch_mode_writes_each_pass_metrics_and_decision_log_as_the_pass_ends(
        local: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from autoscaler.handlers.observability import PowertoolsSink, logger

    # GIVEN the handler's real Powertools metrics (EMF on stdout) and decision log, and one pending pod
    clock = _SkippableClock()
    local.runtime(sink=PowertoolsSink(), clock=clock)
    local.scale("inflate", 1)
    journal = _Journal()
    monkeypatch.setattr(sys, "stdout", journal)
    records = _JournalRecords(journal)
    logger.addHandler(records)
    failures: list[BaseException] = []

    def second_pod_then_end_the_watch() -> None:
        # once pass 1's metrics are out, a second pod starts pass 2 in the same watch; once pass 2's are
        # out, the watch window is over (the runtime's clock is moved past it) and the API server ends the
        # watch stream, so the watch does not resume and the invocation ends
        try:
            _wait_for(lambda: len(journal.heartbeats()) >= 1, "pass 1's metrics while the watch is open")
            local.scale("inflate", 2)
            _wait_for(lambda: len(journal.heartbeats()) >= 2, "pass 2 (the watch's batch of the second pod)")
        except BaseException as exc:
            failures.append(exc)
        finally:
            clock.skip(WINDOW_S)
            local.kube.http_server.stopping.set()

    driver = threading.Thread(target=second_pod_then_end_the_watch, name="test-driver", daemon=True)
    try:
        # WHEN a watch-mode invocation runs, with a watch window long enough for two slow passes on a
        # loaded machine (the driver ends the window once pass 2 is out: the invocation waits for no more)
        driver.start()
        passes = local.invoke_provisioner(watch=True, remaining_ms=int(WINDOW_S * 1000))["passes"]
    finally:
        logger.removeHandler(records)
        local.kube.http_server.stopping.set()
        driver.join(timeout=60)
        local.kube.http_server.stopping.clear()
    assert not failures, failures
    # THEN each pass wrote one EMF document with its heartbeat, and pass 1's document and its decision log
    # line came out before pass 2's: as pass 1 ended, not when the invocation returned
    heartbeats = journal.heartbeats()
    assert len(passes) == len(heartbeats) == 2
    decision_1 = journal.entries.index(("log", passes[0]["summary"]))
    decision_2 = journal.entries.index(("log", passes[1]["summary"]))
    assert decision_1 < heartbeats[0] < decision_2 < heartbeats[1]


def test_pods_placed_on_existing_nodes_stay_placed_until_they_bind(local: LocalCluster) -> None:
    # GIVEN registered, initialised nodes with room, and a new pending pod that fits one of them
    calls = count_create_fleet(local)
    local.runtime()
    local.scale("inflate", 3)
    local.invoke_provisioner()
    local.register_nodes()
    local.invoke_provisioner()  # initialises them (lifecycle)
    assert len(local.schedule_pods()) == 3
    local.scale("small", 1, cpu="100m")
    launched_before = len(calls)
    # WHEN a pass places it on an existing node, and another pass runs before kube-scheduler binds it
    placed = local.invoke_provisioner()["passes"][0]
    assert placed["pendingPods"] == 1 and placed["launched"] == [] and len(calls) == launched_before
    again = local.invoke_provisioner()["passes"][0]
    # THEN the second pass counts it on its node (Karpenter's nomination): nothing to plan, nothing launched
    assert again["pendingPods"] == 0 and again["launched"] == [] and len(calls) == launched_before
    # and once kube-scheduler has bound it, it is an ordinary running pod
    local.schedule_pods()
    assert local.invoke_provisioner()["passes"][0]["pendingPods"] == 0
