"""The committed record of each shipped scenario's run (tests/scenarios/records/NAME.json): its summary,
timeline and events, readable, and a sha256 of each part of its replay (timeline, samples, events,
invocations, assertions, summary, handler errors) and of the whole; the Cluster-Autoscaler baseline's too
when an assertion compares with it. A test runs the scenario once and compares with the record: a run that
depends on the process (hash seed, set or dict order, ids) or an unintended change of behaviour fails it,
naming the parts that differ and showing the summary, timeline and events diffs.

After an intended change of behaviour, re-record (every scenario, or the ones named) and commit the files;
``--check`` compares with the committed records instead, writing nothing (exit status 1 when one differs):

    .venv/bin/python -m tests.scenarios.recording [--check] [NAME ...]
"""

from __future__ import annotations

import difflib
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from moto.server import ThreadedMotoServer

from simulator.local import Catalog, moto_catalog
from simulator.moto_server import SerialMotoServer
from simulator.sim.report import check, replay_json
from simulator.sim.runner import Record, run_scenario
from simulator.sim.scenario import Scenario, load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "simulator" / "scenarios"
RECORDS = Path(__file__).resolve().parent / "records"
RERECORD = ".venv/bin/python -m tests.scenarios.recording"

# Too long for `make test` at full size (2 virtual hours of 500 nodes, about a minute of CPU a run, mostly the
# handlers and moto): recorded shrunk (every replica count, HPA bound and load divided by SHRINK) over their
# first SHRUNK_UNTIL virtual seconds, the scaling, load change and interruption steps of that span included;
# benchmarks/simulation.py measures them at full size, benchmarks/simulation_determinism.py compares two runs.
LONG = ("large-steady", "large-steady-as-deployed")
SHRINK = 20
SHRUNK_UNTIL = 2400.0
SHIPPED = sorted(p.stem for p in SCENARIOS.glob("*.yaml"))


def _shrunk(scenario: Scenario) -> Scenario:
    """The scenario with every replica count, HPA bound and client load divided by ``SHRINK``."""
    initial = scenario.initial.model_copy(update={
        "deployments": [d.model_copy(update={"replicas": max(1, d.replicas // SHRINK)})
                        for d in scenario.initial.deployments],
        "hpas": [h.model_copy(update={"min_replicas": max(1, h.min_replicas // SHRINK),
                                      "max_replicas": max(1, h.max_replicas // SHRINK)})
                 for h in scenario.initial.hpas]})
    steps = []
    for step in scenario.timeline:
        update: dict[str, object] = {}
        if step.scale is not None:
            update["scale"] = step.scale.model_copy(update={"replicas": max(1, step.scale.replicas // SHRINK)})
        elif step.load is not None:
            update["load"] = step.load.model_copy(update={"cpu": step.load.cpu / SHRINK})
        elif step.interrupt is not None:
            update["interrupt"] = step.interrupt.model_copy(update={"count": 1})
        steps.append(step.model_copy(update=update))
    return scenario.model_copy(update={"initial": initial, "timeline": steps})


def recorded_scenario(name: str) -> tuple[Scenario, float | None]:
    """The shipped scenario ``name`` as its record runs it, and the virtual time it runs until (None: its own)."""
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    if name in LONG:
        return _shrunk(scenario), SHRUNK_UNTIL
    return scenario, None


class Run:
    """One run of a shipped scenario as its record runs it: ours, the baseline's when an assertion needs it,
    and the assertions' results."""

    def __init__(self, name: str, moto_server: ThreadedMotoServer, catalog: Catalog) -> None:
        self.name = name
        self.scenario, until = recorded_scenario(name)
        self.record: Record = run_scenario(self.scenario, until=until, moto_server=moto_server, catalog=catalog)
        self.baseline: Record | None = None
        if any(a.ratio_to_baseline is not None for a in self.scenario.assertions):
            self.baseline = run_scenario(self.scenario, until=until, moto_server=moto_server, catalog=catalog,
                                         policy="cluster-autoscaler")
        # A shrunk run is not held to the full-size scenario's assertions (its record still holds them all).
        self.results = check(self.record, self.scenario.assertions, self.baseline)

    def as_record(self) -> dict[str, Any]:
        return {"scenario": self.name, "run": _how(self.name), "rerecord": f"{RERECORD} {self.name}",
                **_digested(replay_json(self.record, self.results)),
                "baseline": None if self.baseline is None else _digested(replay_json(self.baseline, []))}


def _how(name: str) -> str:
    if name in LONG:
        return f"replicas, HPA bounds and load divided by {SHRINK}, until {SHRUNK_UNTIL:g} s"
    return "as shipped"


def _digested(replay: str) -> dict[str, Any]:
    """``replay`` (canonical JSON) as the sha256 of the whole and of each part, plus its readable summary,
    timeline and events (a few kB: a mismatch shows where the story changed)."""
    parts = json.loads(replay)
    return {"sha256": hashlib.sha256(replay.encode()).hexdigest(),
            "parts_sha256": {key: _sha(value) for key, value in sorted(parts.items())},
            "summary": parts["summary"],
            "timeline": [f"{e['t']:8.1f}  {e['source']}: {e['text']}" for e in parts["timeline"]],
            "events": [f"{e['t']:8.1f}  {e['kind']}: {e['what']}" for e in parts["events"]]}


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def record_path(name: str) -> Path:
    return RECORDS / f"{name}.json"


def as_text(record: dict[str, Any]) -> str:
    """A record as committed: one key a line, in the order it was built (summaries come sorted)."""
    return json.dumps(record, indent=1) + "\n"


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> str:
    """What differs between two records of one scenario: the parts whose digests differ (ours and the
    baseline's) and a diff of the summaries; empty when they agree."""
    lines: list[str] = []
    for who, want, got in (("run", expected, actual), ("baseline", expected.get("baseline"), actual.get("baseline"))):
        if want == got:
            continue
        if want is None or got is None:
            lines.append(f"{who}: recorded {'none' if want is None else 'one'}, this run has "
                         f"{'none' if got is None else 'one'}")
            continue
        names = sorted(set(want["parts_sha256"]) | set(got["parts_sha256"]))
        changed = [n for n in names if want["parts_sha256"].get(n) != got["parts_sha256"].get(n)]
        lines.append(f"{who}: parts that differ from the record: {', '.join(changed) or '(none: whole only)'}")
        lines += difflib.unified_diff(as_text(want["summary"]).splitlines(), as_text(got["summary"]).splitlines(),
                                      f"recorded {who} summary", f"this {who} summary", lineterm="", n=1)
        for part in ("timeline", "events"):
            lines += difflib.unified_diff(want.get(part, []), got.get(part, []), f"recorded {who} {part}",
                                          f"this {who} {part}", lineterm="", n=2)
    return "\n".join(lines)


def mismatch_message(name: str, expected: dict[str, Any] | None, actual: dict[str, Any]) -> str:
    path = record_path(name).relative_to(RECORDS.parents[2])
    if expected is None:
        return f"{path} is missing: record it with `{RERECORD} {name}` and commit it"
    return (f"scenario {name} no longer tells the story recorded in {path}:\n{differences(expected, actual)}\n"
            f"If the change is intended, re-record with `{RERECORD} {name}` and commit the file; if not, the run "
            "depends on something other than the scenario (hash seed, set or dict order, state left by an "
            "earlier run) or the behaviour changed by accident.")


def load_record(name: str) -> dict[str, Any] | None:
    path = record_path(name)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(argv if argv is not None else sys.argv[1:])
    check_only = "--check" in args
    names = [a for a in args if a != "--check"] or SHIPPED
    unknown = sorted(set(names) - set(SHIPPED))
    if unknown:
        print(f"no shipped scenario named {', '.join(unknown)} (simulator/scenarios/NAME.yaml): "
              f"one of {', '.join(SHIPPED)}", file=sys.stderr)
        return 2
    RECORDS.mkdir(exist_ok=True)
    catalog = moto_catalog()
    server = SerialMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    differ = 0
    try:
        for name in names:
            record = Run(name, server, catalog).as_record()
            path, recorded = record_path(name), load_record(name)
            shown = path.relative_to(RECORDS.parents[2])
            if check_only:
                differ += recorded != record
                print(f"{shown}: {'same' if recorded == record else 'DIFFERS'} ({record['sha256'][:12]})")
                if recorded != record:
                    print(mismatch_message(name, recorded, record))
                continue
            path.write_text(as_text(record), encoding="utf-8")
            print(f"{shown}: {'unchanged' if recorded == record else 're-recorded'} ({record['sha256'][:12]})")
    finally:
        server.stop()
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
