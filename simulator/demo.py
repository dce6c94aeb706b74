"""``make demo``: the provisioner on the getting-started ``inflate`` scenario, locally.

Starts moto (as a server) and the Kubernetes API emulator, creates a VPC with discovery-tagged subnets
and security group and the EKS AMI parameters, loads ``clusters/demo.yaml`` (moved to us-east-1, the
region the bundled price data covers), creates the ``inflate`` Deployment's 5 pending pods, runs the
real provisioner Lambda handler once (scheduled-only), and says what it saw, decided and launched.
Then it plays kubelet (the instances register as nodes and the pods are bound) and runs a second pass,
which has nothing to do. No AWS account or cluster is needed.
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

from autoscaler.domain.keys import NODECLAIM_TAG
from autoscaler.domain.ownership import pods_from_tags
from autoscaler.handlers.observability import logger as handler_logger
from autoscaler.metrics_catalog import RecordingSink
from simulator import simulate
from simulator.local import LocalCluster, demo_config

WIDTH = 78


def say(text: str = "") -> None:
    print(text, flush=True)


def heading(text: str) -> None:
    say()
    say(f"== {text} " + "=" * max(0, WIDTH - len(text) - 4))


def _join_flags(env: LocalCluster) -> list[str]:
    ec2 = env.session.client("ec2")
    flags = []
    for lt in ec2.describe_launch_templates()["LaunchTemplates"]:
        for v in ec2.describe_launch_template_versions(LaunchTemplateId=lt["LaunchTemplateId"])[
                "LaunchTemplateVersions"]:
            data = base64.b64decode(v["LaunchTemplateData"]["UserData"]).decode()
            flags += [line.strip().removeprefix("- ") for line in data.splitlines()
                      if "--node-labels" in line or "--register-with-taints" in line]
    return flags


def main(argv: Sequence[str] = ()) -> int:
    """The demo; with ``--replay SCENARIO [simulate's options]``, then that scenario in virtual time in the
    same process (``make demo``: one interpreter start and one set of imports serve both)."""
    parser = argparse.ArgumentParser(prog="python -m simulator.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--replay", nargs=argparse.REMAINDER, metavar="SCENARIO ...",
                        help="then run `python -m simulator.simulate SCENARIO ...` with these arguments")
    args = parser.parse_args(argv)
    # The handlers' structured JSON log is for CloudWatch; the demo tells the same story in words.
    # Restore the level afterwards: the logger is shared with every handler in this process.
    level = handler_logger.log_level
    handler_logger.setLevel("WARNING")
    try:
        status = _demo()
    finally:
        handler_logger.setLevel(level)
    if status or not args.replay:
        return status
    say()
    return simulate.main(args.replay)


def _demo() -> int:
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "EKSServerlessAutoscaler")
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.ERROR)
    started = time.monotonic()
    config = demo_config()
    say("Local demo of the serverless EKS autoscaler (moto for AWS, an emulated Kubernetes API).")
    say(f"Cluster {config.cluster_name!r} in {config.region}: NodePool 'default' allows spot only, amd64, "
        "instance sizes above 'large'.")
    with LocalCluster.start(config) as env:
        sink = RecordingSink()
        env.runtime(sink=sink)
        pods = env.scale("inflate", 5)

        heading("What the provisioner saw")
        say(f"{len(pods)} pending pods of the 'inflate' Deployment, each asking for 1 CPU (pause container):")
        say("  " + ", ".join(pods))

        answer: dict[str, Any] = env.invoke_provisioner()["passes"][0]
        heading("What it decided")
        for g in answer["planned"]:
            say(f"{g['count']} new {g['capacityType']} node(s) in NodePool {g['nodePool']!r} for {g['pods']} pods,"
                f" at about ${g['hourlyPrice']:.4f}/hour each (one node claim per instance).")
            say(f"  EC2 may pick any of: {', '.join(g['instanceTypes'][:6])}"
                + (" ..." if len(g["instanceTypes"]) > 6 else ""))
        for u in answer["unschedulable"]:
            say(f"  {u['pod']} cannot be placed: {u['reason']}")
        if answer["failures"]:
            say("Launch failures: " + "; ".join(answer["failures"]))

        heading("What it launched (one EC2 CreateFleet call)")
        claims = env.runtime_claims()
        by_instance = {c.instance_id: c for c in claims if c.instance_id}
        for inst in env.instances():
            claim = by_instance.get(inst.instance_id)
            say(f"{inst.instance_id}: {inst.instance_type} {inst.capacity_type} in {inst.zone}, "
                f"node claim {claim.claim_id if claim else inst.tags.get(NODECLAIM_TAG)}")
            keep = {k: v for k, v in sorted(inst.tags.items()) if not k.startswith("eks-serverless-autoscaler/pods")}
            say("  tags: " + ", ".join(f"{k}={v}" for k, v in keep.items()))
            # The claims table knows each instance's pods (a grouped launch's instances share the group's tags).
            pods = claim.pods if claim else pods_from_tags(inst.tags)
            say(f"  launched for: {', '.join(pods)}")
        shared = {inst.tags.get(NODECLAIM_TAG) for inst in env.instances()}
        if len(env.instances()) > 1 and len(shared) < len(env.instances()):
            say("The instances of one grouped CreateFleet carry the same tags, Name and karpenter.sh/nodeclaim "
                "included: EC2 tags a fleet's instances alike. Each instance's own node claim is the one the "
                "claims table records for it (the 'node claim' shown per instance above); the tag names the "
                "group's first claim.")
        say("Node claims recorded in DynamoDB before CreateFleet, one per instance: "
            + ", ".join(f"{c.claim_id} -> {c.instance_id or '(launching)'}" for c in claims))
        for flag in _join_flags(env):
            say(f"  kubelet joins with {flag}")
        events = [e for e in env.kube.store.objects("events") if e.get("reason") == "Nominated"]
        if events:
            say(f"Each pod got a Kubernetes Event (kubectl describe pod): {events[0]['message']}")
        say(f"Decision log: {answer['summary']}")

        heading("Second pass before the nodes register")
        again = env.invoke_provisioner()["passes"][0]
        say(f"{again['summary']} -- the launching instance already counts as capacity for those pods.")

        heading("The instances join the cluster")
        names = env.register_nodes()
        say(f"Nodes registered: {', '.join(names)}, with karpenter.sh/unregistered:NoExecute as a real kubelet "
            f"does; pods still pending: {len(env.pending_pods())} (nothing binds through that taint).")
        third = env.invoke_provisioner()["passes"][0]
        say(f"Third pass: {third['summary']} -- registering nodes count as capacity, so nothing is launched twice.")
        bound = env.schedule_pods()
        say(f"kube-scheduler binds {len(bound)} pod(s); pending pods now: {len(env.pending_pods())}.")
        node = env.kube.store.get("nodes", None, names[0])
        taints = [t["key"] for t in node["spec"].get("taints") or ()]
        say(f"Node {names[0]} taints now: {taints or 'none'} (karpenter.sh/unregistered removed), "
            f"label intent={node['metadata']['labels'].get('intent')}.")
        launched = sink.total("NodesLaunched")
        say(f"Metrics recorded: NodesLaunched={launched:g}, PendingPods (max)="
            f"{max((v for n, v, _ in sink.points if n == 'PendingPods'), default=0):g}.")
    say(f"\nDone in {time.monotonic() - started:.1f} s. Deploy for real with: make deploy CLUSTER=<name>")
    say("Next, `make demo` replays the getting-started guides' inflate scenario in virtual time "
        "(simulator/scenarios/inflate.yaml). That scenario is not this run: it uses the guides' v1alpha5 "
        "Provisioner (spot, instance families m5 and c5 only, ttlSecondsAfterEmpty 30) instead of this cluster "
        "file's NodePool, so it launches an m5/c5 type where this run chose from every family.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
