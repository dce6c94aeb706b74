"""Scenario 1 of the guides (simulator/scenarios/inflate.yaml) in virtual time through the real
provisioner and disruption handlers: inflate 0 -> 5 -> 0 with ttlSecondsAfterEmpty 30, every
assertion of the file holding, and the registration race caught by "duplicate launches == 0"."""

from __future__ import annotations

import pytest
from moto.server import ThreadedMotoServer

from simulator.local import Catalog
from simulator.sim.report import check, summary
from simulator.sim.runner import run_scenario
from simulator.sim.scenario import Offering, ProvisionerMode, load_scenario
from tests.scenarios.conftest import SCENARIOS

pytestmark = pytest.mark.e2e


def test_inflate_scenario_meets_its_assertions(moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    # Given the shipped scenario
    scenario = load_scenario(SCENARIOS / "inflate.yaml")
    # When it runs for its 6 virtual minutes
    record = run_scenario(scenario, moto_server=moto_server, catalog=local_catalog)
    # Then every assertion holds
    results = check(record, scenario.assertions)
    assert [r for r in results if not r["ok"]] == []
    facts = summary(record)
    # And the story is the guides': one launch pass of spot capacity, nothing launched twice, all gone at the end
    assert facts["duplicate_launches"] == 0
    assert facts["launches"] == facts["terminations"] >= 1
    assert all(r.instance is not None and r.instance.capacity_type == "spot" for r in record.instances)
    assert facts["dollars"] > 0
    sources = {src for _, src, _ in record.timeline}
    assert {"scenario", "provisioner", "ec2", "kubelet", "kube-scheduler", "disruption"} <= sources


def test_registration_race_is_caught(moto_server: ThreadedMotoServer, local_catalog: Catalog,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a provisioner that, as before the fix, does not count registering nodes as capacity
    from autoscaler.domain import initialization

    monkeypatch.setattr(initialization, "as_capacity", lambda node, *_, **__: node)
    scenario = load_scenario(SCENARIOS / "inflate.yaml")
    # When the scenario runs past the first pass that sees the registered-but-tainted nodes
    record = run_scenario(scenario, until=150, moto_server=moto_server, catalog=local_catalog)
    # Then the second pass launches again for the same pods, and the run says so
    facts = summary(record)
    assert facts["duplicate_launches"] >= 1
    assert any("DUPLICATE" in text for _, _, text in record.timeline)


def test_baseline_runs_the_same_scenario_without_our_functions(moto_server: ThreadedMotoServer,
                                                               local_catalog: Catalog) -> None:
    # Given the inflate scenario under the Cluster Autoscaler baseline (ASGs per zone, family and size for
    # the scenario's spot NodePool of c5 and m5)
    scenario = load_scenario(SCENARIOS / "inflate.yaml")
    # When it runs
    record = run_scenario(scenario, until=170, moto_server=moto_server, catalog=local_catalog,
                          policy="cluster-autoscaler")
    facts = summary(record)
    # Then none of the product's functions ran, one group grew (the priority expander's spot group with the
    # least idle CPU) by the nodes the pods need, and every pod runs
    assert record.invocations == {}
    launched = {(r.instance.instance_type, r.instance.capacity_type, r.instance.zone)
                for r in record.instances if r.instance}
    assert len(launched) == 1 and next(iter(launched))[1] == "spot"
    assert facts["launches"] == 2
    assert facts["pods_started"] == 5
    assert facts["pending_pods_at_end"] == 0
    assert any(src == "cluster-autoscaler" and "scale-up" in text for _, src, text in record.timeline)


def test_baseline_backs_a_group_off_after_a_capacity_error(moto_server: ThreadedMotoServer,
                                                           local_catalog: Catalog) -> None:
    # Given inflate under the baseline with no spot capacity for c5.xlarge in any zone
    scenario = load_scenario(SCENARIOS / "inflate.yaml")
    scenario.initial.unavailable = [Offering(instance_type="c5.xlarge", capacity_type="spot")]
    # When it runs
    record = run_scenario(scenario, until=170, moto_server=moto_server, catalog=local_catalog,
                          policy="cluster-autoscaler")
    # Then each c5.xlarge spot group that tried failed and backed off for 5 minutes, the pods went to
    # another group, and they all run
    failed = [text for _, src, text in record.timeline if src == "cluster-autoscaler" and "failed" in text]
    assert failed and all("c5-xlarge-spot" in t and "backing off 300 s" in t for t in failed)
    assert {r.instance.instance_type for r in record.instances if r.instance} != {"c5.xlarge"}
    assert summary(record)["pods_started"] == 5


def test_watch_mode_runs_a_pass_after_the_batching_window(moto_server: ThreadedMotoServer,
                                                          local_catalog: Catalog) -> None:
    # Given the inflate scenario with the provisioner in watch mode (pods scaled up at 10 s, between two
    # scheduled passes)
    scenario = load_scenario(SCENARIOS / "inflate.yaml")
    scenario = scenario.model_copy(update={"provisioner": ProvisionerMode(mode="watch")})
    # When it runs past the pods' start
    record = run_scenario(scenario, until=150, moto_server=moto_server, catalog=local_catalog)
    facts = summary(record)
    # Then one batch invoked the provisioner the idle window after kube-scheduler marked the pods unschedulable
    # (1 s after their creation) plus the async invoke's delay, and that pass launched: not the pass at 1:00
    assert facts["provisioner_mode"] == "watch" and facts["watch_batches"] == 1
    watch = next(t for t, src, _ in record.timeline if src == "watch")
    assert 11.0 < watch < 13.0
    launches = sorted(r.launched_at for r in record.instances)
    assert launches and launches[0] < 15.0
    # And nothing launched twice; every pod runs well within the scheduled mode's ~2 minutes
    assert facts["duplicate_launches"] == 0
    assert facts["pods_started"] == 5 and facts["time_to_running_max"] <= 60


def test_baseline_groups_carry_their_nodepool_s_labels_and_taints(moto_server: ThreadedMotoServer,
                                                                  local_catalog: Catalog) -> None:
    # Given the banana scenario (a weighted NodePool with a fruit=banana taint and label) under the baseline
    scenario = load_scenario(SCENARIOS / "banana.yaml")
    # When it runs
    record = run_scenario(scenario, moto_server=moto_server, catalog=local_catalog, policy="cluster-autoscaler")
    # Then a banana group grew, its nodes registered with the NodePool's label and taint, and every pod
    # (those selecting banana nodes included) runs
    scaled = [text for _, src, text in record.timeline if src == "cluster-autoscaler" and "scale-up" in text]
    assert any(t.startswith("scale-up: banana-") for t in scaled)
    assert summary(record)["pods_never_running"] == 0
