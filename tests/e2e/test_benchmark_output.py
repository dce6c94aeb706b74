"""The scale benchmarks run end to end at a small size and print exactly one JSON object on stdout (the
handler's log lines and EMF metrics, which Lambda writes to stdout, must not reach it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=REPO, timeout=240,
                          check=False, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO / 'functions'}:{REPO}"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # the whole of stdout is one JSON document


def test_the_watch_benchmark_prints_only_its_json() -> None:
    result = _run("benchmarks.provisioner_watch", "--pods", "2", "--spread", "1")
    assert result["benchmark"] == "provisioner_watch" and result["podsLaunched"] + result["podsOnEarlierLaunches"] == 2


def test_a_small_whole_pass_reports_its_phases_and_a_second_pass_launches_nothing() -> None:
    result = _run("benchmarks.provisioner_pass", "--case", "60")
    first, second = result["firstPass"], result["secondPass"]
    assert first["instancesLaunched"] >= 1 and first["failures"] == 0
    assert set(first["phases"]) >= {"gather", "plan", "launch", "events"}
    assert first["phases"]["launch"]["awsCalls"]["ec2.CreateFleet"] >= 1
    # the injected CreateFleet wait is in the launch latency, and the estimate holds the CPU and the latency
    # (the estimate is printed to 0.01 s, its parts to 0.001 s: at one full vCPU it may round below their sum)
    assert first["phases"]["launch"]["latency"] >= 1.5
    assert first["estimate"] >= first["latency"] + first["cpu"] - 0.005
    assert second["instancesLaunched"] == 0
    assert first["kubeRequests"] >= 5 and "GET pods" in first["kubeRequestsByVerb"]
