"""Scenario assertions over windows and against the baseline, on hand-made records: each failure names the
time and the objects involved."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from simulator.sim.report import check
from simulator.sim.runner import Record, Sample
from simulator.sim.scenario import Assertion, Scenario, ScenarioError, load_scenario


def _sample(t: float, pending: int, skew: int = 0, nodes: int = 1) -> Sample:
    return Sample(t=t, pending_pods=pending, running_pods=0, nodes=nodes, ready_nodes=nodes, instances=nodes,
                  dollars_per_hour=0.1 * nodes, nodes_by_pool={}, nodes_by_capacity={}, nodes_by_type={},
                  zone_skew={"web": skew})


def _record() -> Record:
    rec = Record(Scenario(name="t"), until=600.0)
    rec.samples = [_sample(0, 3), _sample(60, 0), _sample(120, 2, skew=2), _sample(180, 0), _sample(600, 0)]
    rec.events = [(30.0, "launch", "i-1 m5.large spot us-east-1a pool default"),
                  (130.0, "eviction", "default/web-1 from ip-10-0-0-4.ec2.internal"),
                  (140.0, "eviction", "default/web-2 from ip-10-0-0-4.ec2.internal")]
    return rec


def _one(rec: Record, raw: dict[str, object], baseline: Record | None = None) -> dict[str, object]:
    [result] = check(rec, [Assertion.model_validate(raw)], baseline)
    return result


def test_a_series_over_a_window_names_the_first_and_last_breach() -> None:
    rec = _record()
    assert _one(rec, {"metric": "pending_pods", "during": ["1m", "1m30s"], "max": 0})["ok"]
    bad = _one(rec, {"metric": "pending_pods", "during": ["1m", "end"], "max": 0})
    assert not bad["ok"] and bad["value"] == 2
    assert bad["detail"] == "first at 0:02:00 (2), last at 0:02:00 (2); 1 of 4 samples"


def test_never_above_over_the_whole_run() -> None:
    rec = _record()
    bad = _one(rec, {"metric": "zone_skew.web", "never": {"above": 1}})
    assert not bad["ok"] and "0:02:00" in str(bad["detail"])
    assert _one(rec, {"metric": "zone_skew.web", "never": {"above": 2}})["ok"]


def test_events_in_a_window_are_counted_and_named() -> None:
    rec = _record()
    assert _one(rec, {"metric": "evictions", "during": ["0s", "2m"], "equal": 0})["ok"]
    bad = _one(rec, {"metric": "evictions", "during": ["2m", "5m"], "equal": 0})
    assert not bad["ok"] and bad["value"] == 2
    assert bad["detail"] == ("2 evictions: 0:02:10 default/web-1 from ip-10-0-0-4.ec2.internal; "
                             "0:02:20 default/web-2 from ip-10-0-0-4.ec2.internal")


def test_ratio_to_baseline_needs_and_uses_the_baseline_run() -> None:
    ours, theirs = _record(), _record()
    raw = {"metric": "max_nodes", "ratioToBaseline": {"max": 1.0}}
    missing = _one(ours, raw)
    assert not missing["ok"] and "--baseline" in str(missing["detail"])
    assert _one(ours, raw, theirs)["ok"]
    theirs.samples = [_sample(0, 0, nodes=0), _sample(60, 0, nodes=0)]
    ours.samples.append(_sample(601, 0, nodes=2))
    bad = _one(ours, {"metric": "max_nodes", "ratioToBaseline": {"max": 1.0}}, theirs)
    assert not bad["ok"] and bad["detail"] == "ours 2, baseline 0"


def test_assertion_forms_that_make_no_sense_are_refused() -> None:
    with pytest.raises(ValueError, match="give a bound"):
        Assertion.model_validate({"metric": "nodes", "during": ["1m", "2m"]})
    with pytest.raises(ValueError, match="ends"):
        Assertion.model_validate({"metric": "nodes", "during": ["2m", "1m"], "max": 1})
    with pytest.raises(ValueError, match="'at' is one time"):
        Assertion.model_validate({"metric": "nodes", "at": "1m", "during": ["1m", "2m"], "max": 1})
    with pytest.raises(ValueError, match="over a window"):
        check(_record(), [Assertion.model_validate({"metric": "dead_letters", "during": ["0s", "1m"], "max": 0})])


def test_start_pins_the_virtual_clock(tmp_path: object) -> None:
    assert Scenario(name="t").start == datetime(2025, 1, 6, tzinfo=UTC)
    pinned = Scenario.model_validate({"name": "t", "start": "2025-03-03T08:55:00+01:00"})
    assert pinned.start == datetime(2025, 3, 3, 7, 55, tzinfo=UTC)
    with pytest.raises(ValueError, match="time zone"):
        Scenario.model_validate({"name": "t", "start": "2025-03-03T08:55:00"})


def test_targets_are_part_of_the_language(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "s.yaml"
    path.write_text("name: s\ntimeline:\n  - {at: 1m, terminate: {zone: us-east-1a, owner: db}}\n"
                    "  - {at: 2m, interrupt: {node: ip-10-0-0-4.ec2.internal}}\n"
                    "  - {at: 3m, stopKubelet: {owner: web, count: 2}}\n")
    s = load_scenario(path)
    assert s.timeline[0].terminate is not None and s.timeline[0].terminate.zone == "us-east-1a"
    assert s.timeline[1].interrupt is not None and s.timeline[1].interrupt.node == "ip-10-0-0-4.ec2.internal"
    path.write_text("name: s\ntimeline:\n  - {at: 1m, terminate: {pod: x}}\n")
    with pytest.raises(ScenarioError, match="pod"):
        load_scenario(path)
