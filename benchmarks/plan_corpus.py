"""Record the plans the scheduler makes on a fixed corpus, so a change meant to keep behaviour can show
it did: every plan made by the scheduling tests (the ported Karpenter cases and the other scheduler
tests), ``autoscaler plan`` on ``examples/*.yaml``, and the ``benchmarks/scheduling.py`` mixes at 1,000
and 5,000 pods.

    python -m benchmarks.plan_corpus record OUT.json.gz   # every plan's JSON (solveSeconds left out)
    python -m benchmarks.plan_corpus compare A.json.gz B.json.gz

A plan is the ``autoscaler plan --output json`` object without ``solveSeconds``. Test plans are keyed
by test id and call number; only the outermost call of ``plan`` or ``plan_reserved_first`` is recorded
(the reserved rounds call ``plan`` inside). Prints ONE JSON object (case count and a digest per group).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autoscaler.domain.plan import Plan
from autoscaler.domain.scheduling import plan, plan_reserved_first

ROOT = Path(__file__).resolve().parent.parent
TESTS = ("tests/domain/test_karpenter_scheduling_suite.py", "tests/domain/test_karpenter_scheduling_topology.py",
         "tests/domain/test_scheduler.py", "tests/domain/test_scheduler_spread.py", "tests/app/test_reservations.py",
         "tests/domain/test_scheduler_properties.py", "tests/app/test_plan_prep.py", "tests/app/test_provisioning.py")
BENCH_SIZES = (1000, 5000)


def canonical(result: Plan) -> dict[str, Any]:
    out = result.to_json()
    out["summary"].pop("solveSeconds", None)
    return out


class Recorder:
    """A pytest plugin that wraps the planner's entry points wherever a loaded module holds them."""

    def __init__(self) -> None:
        self.plans: dict[str, Any] = {}
        self.current = "?"
        self.calls = 0
        self.depth = 0

    def wrap(self, fn: Callable[..., Plan]) -> Callable[..., Plan]:
        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Plan:
            self.depth += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                self.depth -= 1
            if self.depth == 0:
                self.calls += 1
                self.plans[f"{self.current}#{self.calls}"] = canonical(result)
            return result

        return recorded

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        wrapped = {id(plan): self.wrap(plan), id(plan_reserved_first): self.wrap(plan_reserved_first)}
        for module in list(sys.modules.values()):
            name = getattr(module, "__name__", "")
            if not (name.startswith(("tests.", "benchmarks.", "autoscaler.app")) or name == "autoscaler.cli"):
                continue
            for attr, value in list(vars(module).items()):
                if id(value) in wrapped:
                    setattr(module, attr, wrapped[id(value)])

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.current, self.calls = item.nodeid.split("::", 1)[-1], 0


def record(out: Path) -> dict[str, Any]:
    recorder = Recorder()
    code = pytest.main(["-q", "-n", "0", "-p", "no:cacheprovider", "--hypothesis-seed=0", *TESTS],
                       plugins=[recorder])
    corpus: dict[str, Any] = {"tests": recorder.plans, "testExitCode": int(code)}
    from autoscaler.adapters.snapshot_file import load_snapshot  # noqa: PLC0415 (only the record mode needs it)

    corpus["examples"] = {}
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        with contextlib.suppress(Exception):
            corpus["examples"][path.name] = canonical(plan(load_snapshot(str(path))))
    from benchmarks.scheduling import make_input, make_pods  # noqa: PLC0415

    corpus["benchmark"] = {}
    for mix in ("full", "plain"):
        for size in BENCH_SIZES:
            pods = make_pods(size, mix=mix)
            corpus["benchmark"][f"{mix}-{size}"] = canonical(plan(make_input(pods, mix=mix)))
    out.write_bytes(gzip.compress(json.dumps(corpus, sort_keys=True).encode()))
    return corpus


def digests(corpus: dict[str, Any]) -> dict[str, Any]:
    def digest(value: Any) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]

    return {group: {"cases": len(corpus[group]), "sha256": digest(corpus[group])}
            for group in ("tests", "examples", "benchmark")}


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return data


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    differing: dict[str, list[str]] = {}
    for group in ("tests", "examples", "benchmark"):
        old, new = before[group], after[group]
        keys = sorted(set(old) | set(new))
        differing[group] = [k for k in keys if old.get(k) != new.get(k)]
    return {"identical": not any(differing.values()), "differing": differing}


def main() -> None:
    mode, *paths = sys.argv[1:]
    if mode == "record":
        corpus = record(Path(paths[0]))
        print(json.dumps({"recorded": paths[0], **digests(corpus), "testExitCode": corpus["testExitCode"]}))
    elif mode == "compare":
        print(json.dumps(compare(load(Path(paths[0])), load(Path(paths[1]))), indent=1))
    else:
        raise SystemExit("usage: python -m benchmarks.plan_corpus record OUT.json.gz | compare A B")


if __name__ == "__main__":
    main()
