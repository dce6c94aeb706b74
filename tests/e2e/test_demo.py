"""``make demo`` runs and tells the story in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import demo

pytestmark = pytest.mark.e2e


def test_demo_prints_what_it_saw_decided_and_launched(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main() == 0
    out = capsys.readouterr().out
    for expected in ("5 pending pods", "new spot node(s)", "launched for: default/inflate-00000",
                     "--register-with-taints=karpenter.sh/unregistered:NoExecute",
                     "5 fit existing or in-flight capacity",
                     # the kubelet registers with the taint: the pass after registration launches nothing
                     "Third pass: scheduled pass: 5 pending pod(s): 5 fit existing or in-flight capacity",
                     "pending pods now: 0"):
        assert expected in out
    # one node claim per instance, recorded before CreateFleet, each naming its own instance
    [line] = [x for x in out.splitlines() if x.startswith("Node claims recorded in DynamoDB")]
    pairs = line.split(": ", 1)[1].split(", ")
    assert len(pairs) == 2 and len({p.split(" -> ")[1] for p in pairs}) == 2 and "(launching)" not in line


def test_make_demo_replays_the_scenario_in_the_same_process(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    # Given make demo's arguments: the demo, then the guides' inflate scenario with an HTML report
    report = tmp_path / "simulation.html"
    # When they run in one process
    status = demo.main(["--replay", "simulator/scenarios/inflate.yaml", "--report", str(report)])
    # Then both tell their story, the replay meets its assertions and the report is written
    out = capsys.readouterr().out
    assert status == 0
    assert "pending pods now: 0" in out and "Scenario inflate:" in out
    assert out.index("pending pods now: 0") < out.index("Scenario inflate:")
    assert report.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
