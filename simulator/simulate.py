"""``python -m simulator.simulate SCENARIO [--until 2h] [--output text|json] [--plot FILE.png] [--report FILE.html]``
(also ``autoscaler simulate`` from a clone): run a scenario in virtual time against moto and the
Kubernetes API emulator with the real handlers, print its timeline and summary, check its assertions.

Exit status: 0 when every assertion holds, 1 when one fails, 2 when the scenario cannot be run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from autoscaler.domain.errors import ConfigError
from simulator.sim.html_report import write_report
from simulator.sim.report import as_json, as_text, baseline_text, check, plot, ratios, summary
from simulator.sim.runner import run_scenario
from simulator.sim.scenario import ScenarioError, load_scenario, seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulator's arguments (``autoscaler simulate`` passes its own on unchanged)."""
    parser.add_argument("scenario", metavar="SCENARIO", help="a scenario file (simulator/scenarios/*.yaml)")
    parser.add_argument("--until", metavar="DURATION", help="virtual time to simulate (90s, 15m, 2h); "
                        "default: the scenario's own 'until'")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.add_argument("--plot", metavar="FILE.png", help="write nodes by pool and capacity type, pods, $/hour "
                        "and $ spent over time (needs matplotlib: pip install -e '.[plot]', or make simulate)")
    parser.add_argument("--baseline", action="store_true", help="also run the scenario under a Cluster-Autoscaler-"
                        "like policy (one instance type, 10 s scan, 10 min scale-down) and print the ratios")
    parser.add_argument("--report", metavar="FILE.html", help="write a self-contained HTML report (timeline "
                        "charts with event markers, summary, assertions) to open in a browser")


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        scenario = load_scenario(args.scenario)
        until = seconds(args.until) if args.until else None
        record = run_scenario(scenario, until=until)
        # An assertion comparing with the baseline runs it even without --baseline.
        wants_baseline = args.baseline or any(a.ratio_to_baseline is not None for a in scenario.assertions)
        base = run_scenario(scenario, until=until, policy="cluster-autoscaler") if wants_baseline else None
        results = check(record, scenario.assertions, base)
    except (ScenarioError, ConfigError, ValueError) as exc:
        print(f"autoscaler simulate: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        out = as_json(record, results)
        if base is not None:
            out["baseline"] = {"summary": summary(base), "ratios": ratios(record, base),
                               "timeline": as_json(base, [])["timeline"]}
        print(json.dumps(out, indent=2))
    else:
        print(as_text(record, results))
        if base is not None:
            print("\n" + baseline_text(record, base))
    if args.plot:
        if plot(record, args.plot, baseline=base):
            print(f"plot written to {args.plot}", file=sys.stderr)
        else:
            print("autoscaler simulate: --plot needs matplotlib (pip install -e '.[plot]', or make simulate); "
                  "no plot written",
                  file=sys.stderr)
    if args.report:
        write_report(record, args.report, results=results, baseline=base)
        print(f"report written to {Path(args.report).resolve()} (open it in a browser)", file=sys.stderr)
    runs = "both runs" if base is not None else "the run"
    print(f"autoscaler simulate: {time.monotonic() - started:.1f} s wall in all ({runs}, with the start-up of "
          "moto and the Kubernetes API emulator)", file=sys.stderr)
    return 0 if all(r["ok"] for r in results) else 1


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m simulator.simulate") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
