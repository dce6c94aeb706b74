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

import boto3

from autoscaler import __version__
from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.aws.userdata import ClusterInfo
from autoscaler.adapters.kube.auth import api_client_from_kubeconfig
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.adapters.snapshot_file import collect_snapshot, load_snapshot, write_snapshot
from autoscaler.app.lifecycle import REGISTRATION_TIMEOUT_SECONDS
from autoscaler.app.planning import decide
from autoscaler.app.ports import CloudError, ClusterError
from autoscaler.config import load_cluster_config
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.initialization import capacity_view
from autoscaler.domain.plan import Plan, PlanInput
from autoscaler.validate import validate_file

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


def plan_snapshot(snap: PlanInput, *, registration_timeout: float = REGISTRATION_TIMEOUT_SECONDS,
                  now: float | None = None) -> Plan:
    """What the provisioner's pass would decide for this snapshot: the same view of registering nodes and
    in-flight instances (``capacity_view``, at the snapshot's ``takenAt``, else ``now``, else the current
    time) and the same decision (``app/planning.decide``)."""
    when = snap.taken_at or (time.time() if now is None else now)
    return decide(capacity_view(snap, now=when, registration_timeout=registration_timeout), timer=time.perf_counter)


def _register_plan(sub: argparse.ArgumentParser) -> Command:
    sub.add_argument("--snapshot", required=True, metavar="FILE", help="cluster snapshot, YAML or JSON")
    sub.add_argument("--output", choices=("json", "text"), default="json")
    sub.add_argument("--registration-timeout", type=float, default=float(REGISTRATION_TIMEOUT_SECONDS),
                     metavar="SECONDS", help="the cluster file's provisioner.registrationTimeout, in seconds "
                     f"(default {REGISTRATION_TIMEOUT_SECONDS}): a registering node younger than this at the "
                     "snapshot's takenAt counts as capacity, as in the provisioner's pass")

    def run(args: argparse.Namespace) -> int:
        try:
            result = plan_snapshot(load_snapshot(args.snapshot), registration_timeout=args.registration_timeout)
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


def simulate(argv: Sequence[str]) -> int:
    """``autoscaler simulate ARGS``: ``simulator.simulate.main(ARGS)``. The simulator (development tooling in
    a clone, never in the Lambda bundle or the wheel) owns its arguments; it is imported by name only here,
    when the command runs, and never imports the CLI back (``.importlinter``; tests/test_shipped_imports.py
    checks this is the package's one reference to it)."""
    try:
        module = importlib.import_module("simulator.simulate")
    except ImportError as exc:
        print(f"{SIMULATOR_MISSING} ({exc})", file=sys.stderr)
        return 2
    code: int = module.main(list(argv), prog="autoscaler simulate")
    return code


def _register_simulate(sub: argparse.ArgumentParser) -> Command:
    sub.add_argument("args", nargs=argparse.REMAINDER, metavar="SCENARIO [OPTIONS]",
                     help="passed to the simulator: `autoscaler simulate --help` lists them")

    def run(args: argparse.Namespace) -> int:
        return simulate(args.args)

    return run


def _register_validate(sub: argparse.ArgumentParser) -> Command:
    sub.add_argument("files", nargs="+", metavar="FILE",
                     help="cluster files, NodePool/EC2NodeClass manifests or snapshots (told apart by content)")
    sub.add_argument("--output", choices=("text", "json"), default="text")

    def run(args: argparse.Namespace) -> int:
        reports = [validate_file(f) for f in args.files]
        errors = sum(r.errors for r in reports)
        warnings = sum(r.warnings for r in reports)
        if args.output == "json":
            print(json.dumps({"files": [r.to_json() for r in reports], "errors": errors, "warnings": warnings},
                             indent=2))
        else:
            for r in reports:
                for problem in r.problems:
                    print(problem.render(r.path))
                if not r.problems:
                    print(f"{r.path}: OK ({r.kind})")
            print(f"{errors} error(s), {warnings} warning(s) in {len(reports)} file(s)",
                  file=sys.stderr if errors else sys.stdout)
        return 1 if errors else 0

    return run


def _register_snapshot(sub: argparse.ArgumentParser) -> Command:
    sub.add_argument("--cluster-file", required=True, metavar="FILE",
                     help="the cluster file whose NodePools and EC2NodeClasses the snapshot carries")
    sub.add_argument("--context", help="kubeconfig context (default: the current one)")
    sub.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    sub.add_argument("--region", help="AWS region (default: the cluster file's)")
    sub.add_argument("--output", "-o", required=True, metavar="FILE", help="where to write; .json for JSON, else YAML")

    def run(args: argparse.Namespace) -> int:
        try:
            config = load_cluster_config(args.cluster_file)
            region = args.region or config.region
            kube = KubeCluster(api_client_from_kubeconfig(config_file=args.kubeconfig, context=args.context))
            # Only reads are made: the join settings (endpoint, CA) a launch would need are not.
            info = ClusterInfo(name=config.cluster_name, endpoint="", certificate_authority="", k8s_version="")
            cloud = AwsCloud.from_session(boto3.Session(region_name=region), region=region, cluster=info)
            doc = collect_snapshot(list_raw=kube.list_raw, cloud=cloud, region=region,
                                   node_pools=config.node_pools, node_classes=config.node_classes,
                                   taken_at=time.time())
            write_snapshot(doc, args.output)
        except (ConfigError, ClusterError, CloudError, OSError) as exc:
            print(f"autoscaler snapshot: {exc}", file=sys.stderr)
            return 1
        pending = sum(1 for p in doc["pods"] if not (p.get("spec") or {}).get("nodeName"))
        print(f"wrote {args.output}: {len(doc['pods'])} pods ({pending} pending), {len(doc['nodes'])} nodes, "
              f"{len(doc['instanceTypes'])} instance types, {len(doc['inFlight'])} in-flight instances",
              file=sys.stderr)
        if not doc["prices"]["onDemand"]:
            print("warning: no on-demand prices (pricing:GetProducts failed or is not allowed): plan will "
                  "price spot offerings only", file=sys.stderr)
        return 0

    return run


COMMANDS["snapshot"] = ("Write a snapshot of a live cluster (kubeconfig context + AWS region) for "
                        "'autoscaler plan' (docs/snapshot.md).", _register_snapshot)
COMMANDS["validate"] = ("Check cluster files, NodePool/EC2NodeClass manifests and snapshots; report every "
                        "problem with its line. Exit code 1 when any file has an error.", _register_validate)
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
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["simulate"]:  # every argument after it, --help too, is the simulator's
        return simulate(given[1:])
    parser = build_parser()
    args = parser.parse_args(given)
    run: Command | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
