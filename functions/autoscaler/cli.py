"""The ``autoscaler`` console script: offline planning and operator tools.

Sub-commands are registered in ``COMMANDS``; each gets its own argparse sub-parser.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable, Sequence

from autoscaler import __version__
from autoscaler.adapters.snapshot_file import load_snapshot
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.plan import Plan
from autoscaler.domain.scheduling import plan as solve

Command = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], Command]]] = {}


def _plan_text(result: Plan) -> str:
    lines = [f"{len(result.launches)} node(s) to launch, ${result.hourly_price:.4f}/hour, "
             f"{result.pending_pods} pending pod(s), solved in {result.solve_seconds:.3f}s"]
    for ln in result.launches:
        more = f" (+{len(ln.instance_types) - 3} more)" if len(ln.instance_types) > 3 else ""
        lines.append(f"  {ln.node_pool} {ln.capacity_type} {','.join(ln.zones)} "
                     f"{', '.join(ln.instance_types[:3])}{more} ${ln.hourly_price:.4f}/h: {len(ln.pods)} pod(s)")
    for key, node in sorted(result.existing.items()):
        lines.append(f"  {key} -> existing {node}")
    for u in result.unschedulable:
        lines.append(f"  {u.pod} unschedulable: {u.reason}")
    return "\n".join(lines)


def _register_plan(sub: argparse.ArgumentParser) -> Command:
    sub.add_argument("--snapshot", required=True, metavar="FILE", help="cluster snapshot, YAML or JSON")
    sub.add_argument("--output", choices=("json", "text"), default="json")

    def run(args: argparse.Namespace) -> int:
        try:
            result = solve(load_snapshot(args.snapshot), timer=time.perf_counter)
        except ConfigError as exc:
            print(f"autoscaler plan: {exc}", file=sys.stderr)
            return 2
        if args.output == "json":
            print(json.dumps(result.to_json(), indent=2, sort_keys=False))
        else:
            print(_plan_text(result))
        return 0

    return run


COMMANDS["plan"] = ("Plan node launches for a cluster snapshot, offline (no AWS or Kubernetes calls).",
                    _register_plan)


SIMULATOR_MISSING = ("autoscaler simulate: the simulator is not installed here (it lives in the repository's "
                     "simulator/ package and is never part of the Lambda bundle): run it from a clone, "
                     "e.g. `python -m simulator.simulate simulator/scenarios/inflate.yaml`")


def _register_simulate(sub: argparse.ArgumentParser) -> Command:
    # The same arguments as `python -m simulator.simulate`; the simulator (development tooling outside
    # the shipped package, never in the Lambda bundle) is imported by name only when the command runs.
    sub.add_argument("scenario", metavar="SCENARIO", help="a scenario file (simulator/scenarios/*.yaml)")
    sub.add_argument("--until", metavar="DURATION", help="virtual time to simulate (90s, 15m, 2h); "
                     "default: the scenario's own 'until'")
    sub.add_argument("--output", choices=("text", "json"), default="text")
    sub.add_argument("--plot", metavar="FILE.png", help="write nodes, pending pods and $/hour over time "
                     "(needs matplotlib)")

    def run(args: argparse.Namespace) -> int:
        try:
            simulate = importlib.import_module("simulator.simulate")
        except ImportError as exc:
            print(f"{SIMULATOR_MISSING} ({exc})", file=sys.stderr)
            return 2
        code: int = simulate.run(args)
        return code

    return run


COMMANDS["simulate"] = ("Replay a scenario (simulator/scenarios/*.yaml) in virtual time against moto and an "
                        "emulated cluster: timeline, summary, assertions, plot. Needs a repository clone.",
                        _register_simulate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoscaler",
        description="Serverless node autoscaler for Amazon EKS: plan node launches offline, "
        "inspect configuration, and run the Lambda logic locally.",
    )
    parser.add_argument("--version", action="version", version=f"autoscaler {__version__}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, register) in sorted(COMMANDS.items()):
        sub = subs.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(run=register(sub))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Command | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
