"""``make demo`` ends with a replay of inflate.yaml in virtual time that writes the HTML report and says
where it is: the Makefile's demo recipe, and the replay (``simulator.simulate``, which ``demo --replay``
hands its arguments to; tests/e2e/test_demo.py runs the whole demo) writing a self-contained page and
printing its absolute path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator import simulate

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def _demo_recipe() -> str:
    text = (ROOT / "Makefile").read_text()
    start = text.index("\ndemo:")
    end = text.index("\n\n", start + 1)
    return text[start:end]


def test_make_demo_writes_the_report_and_says_where() -> None:
    recipe = _demo_recipe()
    assert "simulator/scenarios/inflate.yaml" in recipe
    assert "--report simulation.html" in recipe
    assert "HTML report: file://$(CURDIR)/simulation.html" in recipe


def test_simulate_writes_a_self_contained_report_and_prints_its_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "simulation.html"
    # When the demo's replay runs with --report
    assert simulate.main([str(ROOT / "simulator" / "scenarios" / "inflate.yaml"), "--report", str(report)]) == 0
    err = capsys.readouterr().err
    # Then the page is there, needs no network, and the command named it by its absolute path
    html = report.read_text()
    assert "<svg" in html or "<canvas" in html
    assert not re.search(r"<(script|link)[^>]+(src|href)=\"https?://", html)
    assert f"report written to {report.resolve()}" in err
