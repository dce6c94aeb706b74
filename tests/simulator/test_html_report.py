"""The HTML report (``--report``): one self-contained file, rendered by headless Chromium without script
errors, with its charts, markers and assertion table; a screenshot is saved beside the test's output."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from simulator.sim.html_report import render, write_report
from simulator.sim.runner import Record, Sample
from simulator.sim.scenario import Scenario

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


def _record(dollars_per_node: float = 0.04) -> Record:
    rec = Record(Scenario(name="demo-report", description="hand-made run"), until=600.0)
    spent = 0.0
    for t in range(0, 601, 10):
        nodes = 0 if t < 90 else (3 if t < 360 else 2)
        spent += nodes * dollars_per_node * 10 / 3600
        rec.samples.append(Sample(
            t=float(t), pending_pods=6 if 20 <= t < 130 else 0, running_pods=6 if t >= 130 else 0, nodes=nodes,
            ready_nodes=nodes, instances=nodes, dollars_per_hour=nodes * dollars_per_node, nodes_by_pool={},
            nodes_by_capacity={}, nodes_by_type={},
            nodes_by_pool_capacity={"default/spot": nodes - 1, "default/on-demand": 1} if nodes else {},
            dollars=spent, zone_skew={"web": 0}))
    rec.timeline = [(10.0, "scenario", "apply deployment web (6 replicas)"),
                    (360.0, "scenario", "FIS: interrupt 1 spot instance(s): i-1")]
    rec.events = [(60.0, "launch", "i-1 c6a.xlarge spot us-east-1a pool default"),
                  (360.0, "interruption", "i-1 node ip-10-0-0-4.ec2.internal"),
                  (361.0, "eviction", "default/web-1 from ip-10-0-0-4.ec2.internal </script><b>x</b>"),
                  (363.0, "termination", "i-1 (interrupted) node ip-10-0-0-4.ec2.internal")]
    return rec


def test_the_report_is_self_contained_and_escapes_what_it_shows() -> None:
    page = render(_record(), [{"assertion": "pending_pods during 0:03:00-end <= 0", "value": 0, "ok": True},
                              {"assertion": "evictions == 0", "value": 1, "ok": False,
                               "detail": "1 evictions: 0:06:01 default/web-1"}], _record(0.19))
    # No network: nothing is fetched (no src/href to another origin, no imports, no CDN)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "<link" not in page
    # Every chart and the baseline are drawn; the event text is escaped, and the data block cannot end early
    assert page.count('<figure class="chart">') == 5
    assert "baseline (Cluster Autoscaler) nodes" in page and "baseline $ spent" in page
    assert "<b>x</b>" not in page
    assert page.count("</script>") == 3
    assert 'class="fail"' in page and "1 evictions: 0:06:01 default/web-1" in page


def test_chromium_renders_the_report_without_script_errors(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (the Makefile's test target installs Debian's chromium)")
    report = tmp_path / "report.html"
    write_report(_record(), str(report), results=[], baseline=_record(0.19))
    profile = tmp_path / "profile"
    base = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*base, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=180,
                         check=True).stdout
    # The page's own script ran to the end (it marks the body) and no script error was recorded
    assert 'data-rendered="ok"' in dom, dom[:2000]
    assert not re.search(r"<html[^>]*data-js-error", dom), dom[:500]
    shot = tmp_path / "report.png"
    subprocess.run([*base, "--window-size=1200,2200", f"--screenshot={shot}", report.as_uri()],
                   capture_output=True, timeout=180, check=True)
    assert shot.stat().st_size > 10_000
    keep = Path(__file__).resolve().parents[2] / "build" / "report-screenshot.png"
    keep.parent.mkdir(exist_ok=True)
    shutil.copyfile(shot, keep)  # for a person to look at
