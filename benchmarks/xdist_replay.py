"""Replays a full test run's per-test times through pytest-xdist's two schedulers that `make test` could use
with two workers (``load``, the default, and ``worksteal``) and prints when each worker would finish.

Why: the suite's wall time on two cores is the later worker's finish, and ``load`` never takes back the chunk
of consecutive tests it handed a worker, so one worker can sit idle at the end. The replay follows xdist
3.8's rules (scheduler/load.py and scheduler/worksteal.py): the same chunk sizes, the same refill thresholds,
stealing half of the busier queue; the order is the suite's collection order. It assumes each test takes its
JUnit time whichever worker runs it, and leaves out worker start-up and collection (the same for both).

    .venv/bin/python -m pytest --junitxml=run.xml ...      # a full run's times
    .venv/bin/python -m benchmarks.xdist_replay run.xml    # one JSON object
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNKNOWN_SECONDS = 0.5  # a test the run did not report (collected since): its assumed time
MIN_PENDING = 2  # xdist's worksteal: a worker with fewer queued tests asks for more


def junit_times(path: Path) -> dict[str, float]:
    """Node id -> seconds, from a JUnit XML (classname ``tests.dir.module[.Class]`` + name)."""
    times: dict[str, float] = {}
    for case in ET.parse(path).iter("testcase"):
        parts = case.get("classname", "").split(".")
        for cut in range(len(parts), 0, -1):
            module = "/".join(parts[:cut]) + ".py"
            if (ROOT / module).is_file():
                times["::".join([module, *parts[cut:], case.get("name", "")])] = float(case.get("time", 0))
                break
    return times


def collection_order() -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=", "-p",
                           "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, check=False)
    return [line.strip() for line in done.stdout.splitlines() if "::" in line]


def replay_load(times: list[float]) -> list[float]:
    """xdist's ``load``: a first chunk of a quarter of each worker's share, then refills from the front."""
    pending = list(range(len(times)))
    chunk = max(len(times) // 2 // 4, 2)
    queues: list[list[int]] = []
    for _ in range(2):
        queues.append(pending[:chunk])
        del pending[:chunk]
    finish = [0.0, 0.0]
    while any(queues):
        _, worker = min((finish[w] + times[queues[w][0]], w) for w in range(2) if queues[w])
        done = queues[worker].pop(0)
        finish[worker] += times[done]
        if pending:
            low, high = max(2, len(pending) // 2 // 4), max(2, len(pending) // 2 // 2)
            waiting = times[done] >= 0.1 and len(queues[worker]) >= 2  # "a node doing long-running tests"
            if len(queues[worker]) < low and not waiting:
                take = high - len(queues[worker])
                queues[worker].extend(pending[:take])
                del pending[:take]
    return finish


def replay_worksteal(times: list[float]) -> list[float]:
    """xdist's ``worksteal``: each worker starts with one half in order; an idle one steals the other's tail."""
    half = len(times) // 2
    queues = [list(range(half)), list(range(half, len(times)))]
    finish = [0.0, 0.0]
    while any(queues):
        _, worker = min((finish[w] + times[queues[w][0]], w) for w in range(2) if queues[w])
        finish[worker] += times[queues[worker].pop(0)]
        if len(queues[worker]) < MIN_PENDING:
            other = queues[1 - worker]
            steal = min(len(other) // 2, max(0, len(other) - MIN_PENDING))
            if steal:
                queues[worker].extend(other[-steal:])
                del other[-steal:]
    return finish


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path, help="the JUnit XML of a full run (pytest --junitxml)")
    args = parser.parse_args()
    known = junit_times(args.junit)
    order = collection_order()
    times = [known.get(test, UNKNOWN_SECONDS) for test in order]
    out: dict[str, object] = {
        "benchmark": "xdist_replay", "workers": 2, "tests": len(order),
        "testsWithoutATime": sum(test not in known for test in order), "secondsAssumedForThose": UNKNOWN_SECONDS,
        "sumOfTestSeconds": round(sum(times), 1),
        "assumptions": "each test takes its JUnit time on either worker; start-up and collection left out",
    }
    for name, replay in (("load", replay_load), ("worksteal", replay_worksteal)):
        finish = replay(times)
        out[name] = {"workerFinishSeconds": [round(f, 1) for f in finish], "wallSeconds": round(max(finish), 1),
                     "idleSecondsAtTheEnd": round(max(finish) - min(finish), 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
