"""Soak: many provisioner passes over a growing pending set with faults injected at random, checked by
an oracle that shares no code with the provisioner. Prints ONE JSON object.

The real ``Provisioner`` runs against moto (as a server, with EC2's client-token idempotency supplied
by ``simulator.ec2_tokens``), the node-claims table in moto's DynamoDB and the Kubernetes API emulator.
Virtual time moves 5 s per pass. Each pass, at random (seeded): new pods of 0.25-2 CPU arrive; a new
Lambda container is used; CreateFleet, DescribeInstances or the claims Query are throttled; CreateFleet
answers are lost after EC2 acted (1-7 in a row: from 6 on the call fails); DescribeInstances hides the
pass's new instances for 1-3 passes; the pass is killed right before or right after CreateFleet; two
passes run at once in two containers. A kubelet registers instances two passes after launch (with the
registration taint), the passes' lifecycle step initialises them, and a strict binder binds pods.

The oracle reads EC2 with its own client (no fault hooks) and the claim documents as they were written:
- ``extraInstances``: instances launched for pods that all already had an instance launched for them
  which was not yet a node kube-scheduler could bind to (a double launch). Must be 0.
- ``unaccounted``: instances no claim ever named (a launch without its record). Must be 0.
- ``limitOvershootVcpu``: the most the NodePool's live instances ever exceeded its cpu limit. Must be 0.

    python -m benchmarks.provisioner_soak [--passes 200] [--seed 11]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

import boto3  # noqa: E402
from botocore.awsrequest import AWSResponse  # noqa: E402

from autoscaler.adapters.clock import SystemClock  # noqa: E402
from autoscaler.app.provisioner import Provisioner, ProvisionerSettings  # noqa: E402
from autoscaler.domain.fleet import instance_from_ec2  # noqa: E402
from autoscaler.handlers.runtime import Runtime  # noqa: E402
from simulator.ec2_tokens import ClientTokens  # noqa: E402
from simulator.local import LocalCluster, demo_config, inflate_pod  # noqa: E402

CPU_LIMIT = 320
SECONDS_PER_PASS = 5.0
KUBELET_DELAY_PASSES = 2


class Killed(BaseException):
    """The Lambda runtime stopping the function mid-pass."""


@dataclass
class VirtualClock(SystemClock):
    """The soak's time: it moves only when the soak says (``shift``) or a pass sleeps, never with the
    machine's speed, so a loaded machine runs the same soak as an idle one."""

    shift: float = 0.0
    _wall: float = field(default_factory=time.time)
    _mono: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return self._wall + self.shift

    def monotonic(self) -> float:
        return self._mono + self.shift

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.shift += max(0.0, seconds)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, *_: Any, **__: Any) -> Any:
        yield self._body


_THROTTLE = {
    "ec2": (400, b'<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.'
                 b'</Message></Error></Errors><RequestID>soak</RequestID></Response>', "text/xml"),
    "dynamodb": (400, b'{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate exceeded"}',
                 "application/x-amz-json-1.0"),
}


@dataclass
class Faults:
    """The botocore-level faults, armed per pass."""

    throttles: dict[str, int] = field(default_factory=dict)  # event name -> sends left to throttle
    hidden: dict[str, int] = field(default_factory=dict)  # instance id -> passes left hidden
    hide_new: int = 0  # hide instances CreateFleet returns for this many passes
    kill: str = ""  # "before" / "after" CreateFleet
    lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, events: Any) -> None:
        for name in ("before-send.ec2.CreateFleet", "before-send.ec2.DescribeInstances", "before-send.dynamodb.Query"):
            events.register_first(name, self._throttle)
        events.register("before-send.ec2.CreateFleet", self._kill_before)
        events.register("after-call.ec2.CreateFleet", self._after_fleet)
        events.register("after-call.ec2.DescribeInstances", self._lag)

    def _throttle(self, request: Any, event_name: str, **_: Any) -> AWSResponse | None:
        with self.lock:
            left = self.throttles.get(event_name, 0)
            if left <= 0:
                return None
            self.throttles[event_name] = left - 1
        status, body, kind = _THROTTLE["dynamodb" if ".dynamodb." in event_name else "ec2"]
        return AWSResponse(request.url, status, {"Content-Type": kind}, _Raw(body))

    def _kill_before(self, **_: Any) -> None:
        with self.lock:
            if self.kill != "before":
                return
            self.kill = ""
        raise Killed("before CreateFleet")

    def _after_fleet(self, parsed: dict[str, Any], **_: Any) -> None:
        with self.lock:
            if self.hide_new:
                for inst in parsed.get("Instances", ()):
                    for iid in inst.get("InstanceIds", ()):
                        self.hidden[iid] = self.hide_new
            kill, self.kill = self.kill == "after", "" if self.kill == "after" else self.kill
        if kill:
            raise Killed("after CreateFleet")

    def _lag(self, parsed: dict[str, Any], **_: Any) -> None:
        with self.lock:
            hidden = {i for i, n in self.hidden.items() if n > 0}
        for reservation in parsed.get("Reservations", ()):
            reservation["Instances"] = [i for i in reservation["Instances"] if i["InstanceId"] not in hidden]

    def end_pass(self) -> None:
        with self.lock:
            self.hidden = {i: n - 1 for i, n in self.hidden.items() if n > 1}
            self.hide_new, self.kill = 0, ""
            self.throttles.clear()


@dataclass
class Oracle:
    """What really happened, read without the product's code paths or fault hooks."""

    ec2: Any
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)  # claim id -> last document written
    launched_pass: dict[str, int] = field(default_factory=dict)  # instance id -> pass first seen
    not_ready_before: dict[int, set[str]] = field(default_factory=dict)  # pass -> instances not initialised
    overshoot: float = 0.0
    vcpus: dict[str, int] = field(default_factory=dict)

    def record_writes(self, events: Any) -> None:
        events.register("before-parameter-build.dynamodb.TransactWriteItems", self._transact)
        events.register("before-parameter-build.dynamodb.BatchWriteItem", self._batch)

    def _doc(self, item: dict[str, Any]) -> None:
        if "doc" in item:
            doc = json.loads(item["doc"]["S"])
            self.claims[doc["id"]] = doc

    def _transact(self, params: dict[str, Any], **_: Any) -> None:
        for t in params.get("TransactItems", ()):
            self._doc(t.get("Put", {}).get("Item", {}))

    def _batch(self, params: dict[str, Any], **_: Any) -> None:
        for requests in params.get("RequestItems", {}).values():
            for r in requests:
                self._doc(r.get("PutRequest", {}).get("Item", {}))

    def instances(self) -> list[Any]:
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "tag-key", "Values": ["karpenter.sh/nodepool"]}])
        return [instance_from_ec2(i) for p in pages for r in p["Reservations"] for i in r["Instances"]]

    def observe(self, pass_no: int, env: LocalCluster) -> None:
        """After a pass: note new instances, the pool's live vCPUs against its limit."""
        live = [i for i in self.instances() if i.state not in ("terminated", "shutting-down")]
        for i in self.instances():
            self.launched_pass.setdefault(i.instance_id, pass_no)
        if not self.vcpus:
            infos = self.ec2.get_paginator("describe_instance_types").paginate()
            self.vcpus = {t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for p in infos for t in p["InstanceTypes"]}
        self.overshoot = max(self.overshoot, sum(self.vcpus[i.instance_type] for i in live) - CPU_LIMIT)

    def before_pass(self, pass_no: int, env: LocalCluster) -> None:
        # A node kube-scheduler can bind to (no NoSchedule/NoExecute taint left): from then on the binder,
        # not the autoscaler, decides which pods it takes, and a pod it left out is rightly launched for.
        bindable = {(n.get("spec") or {}).get("providerID", "").rsplit("/", 1)[-1]
                    for n in env.kube.store.objects("nodes")
                    if not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in n["spec"].get("taints") or ())}
        self.not_ready_before[pass_no] = {i for i in self.launched_pass if i not in bindable}

    def verdict(self) -> dict[str, Any]:
        pods_of: dict[str, set[str]] = {}
        self.details: list[dict[str, Any]] = []
        for doc in self.claims.values():
            if doc.get("state") == "launched" and doc.get("instanceId"):
                pods_of[doc["instanceId"]] = set(doc.get("pods", ()))
        everything = self.instances()
        unaccounted = sorted(i.instance_id for i in everything if i.instance_id not in pods_of)
        extra = []
        order = sorted(pods_of, key=lambda i: (self.launched_pass.get(i, 0), i))
        for n, iid in enumerate(order):
            at = self.launched_pass.get(iid, 0)
            pending_elsewhere = set().union(*(pods_of[j] for j in order[:n] if j in self.not_ready_before.get(at, ())
                                              and self.launched_pass.get(j, 0) <= at))
            if pods_of[iid] and pods_of[iid] <= pending_elsewhere:
                extra.append(iid)
                self.details.append({"instance": iid, "pass": at, "pods": sorted(pods_of[iid]),
                                     "alsoOn": sorted(j for j in order[:n] if pods_of[j] & pods_of[iid])})
        return {"instances": len(everything), "extraInstances": len(extra), "unaccounted": len(unaccounted),
                "limitOvershootVcpu": max(0.0, self.overshoot), "extraIds": extra[:10],
                "extraDetails": self.details[:5],
                "unaccountedIds": unaccounted[:10]}


def _provisioner(rt: Runtime, clock: VirtualClock) -> Provisioner:
    settings = ProvisionerSettings(cluster_name=rt.config.cluster_name, region=rt.config.region,
                                   registration_timeout=7200.0)
    return Provisioner(cluster=rt.cluster, cloud=rt.cloud, node_pools=rt.node_pools, node_classes=rt.node_classes,
                       settings=settings, clock=clock, claims=rt.claims)


def _run_one(make: Callable[[], Provisioner], outcome: dict[str, int]) -> None:
    try:
        make().run_pass(reason="soak")
        outcome["passes"] += 1
    except Killed:
        outcome["killed"] += 1


def run(*, passes: int = 200, seed: int = 11, moto_server: Any = None, catalog: Any = None) -> dict[str, Any]:
    """``moto_server``/``catalog``: reuse a running moto server and instance catalogue (tests)."""
    rng = random.Random(seed)
    pool = demo_config().node_pools[0]
    pool = {**pool, "spec": {**pool["spec"], "limits": {"cpu": CPU_LIMIT}}}
    config = demo_config(node_pools=[pool])
    clock = VirtualClock()
    faults = Faults()
    counts = {"passes": 0, "killed": 0, "overlapping": 0, "newContainers": 0, "throttled": 0, "lostAnswers": 0,
              "describeLag": 0, "pods": 0}
    started = time.monotonic()
    with LocalCluster.start(config, moto_server=moto_server, catalog=catalog) as env:
        oracle = Oracle(ec2=boto3.Session(region_name=config.region).client("ec2"))
        oracle.record_writes(env.session.events)
        faults.install(env.session.events)
        tokens: ClientTokens = env.tokens
        containers = [_provisioner(env.runtime(clock=clock), clock)]
        for n in range(passes):
            if rng.random() < 0.4:
                app = f"app{rng.randrange(6)}"
                cpu = rng.choice(["250m", "500m", "1", "2"])
                for _ in range(rng.randint(1, 12)):
                    env.kube.store.create("pods", inflate_pod(f"{app}-{counts['pods']:05d}", app=app, cpu=cpu))
                    counts["pods"] += 1
            if rng.random() < 0.2:
                containers = [_provisioner(env.runtime(clock=clock), clock)]
                counts["newContainers"] += 1
            roll = rng.random()
            if roll < 0.12:
                op = rng.choice(["before-send.ec2.CreateFleet", "before-send.ec2.DescribeInstances",
                                 "before-send.dynamodb.Query"])
                faults.throttles[op] = rng.randint(1, 2)
                counts["throttled"] += 1
            elif roll < 0.27:
                tokens.lose_responses(rng.randint(1, 7))
                counts["lostAnswers"] += 1
            elif roll < 0.40:
                faults.hide_new = rng.randint(1, 3)
                counts["describeLag"] += 1
            elif roll < 0.50:
                faults.kill = "after"
            elif roll < 0.60:
                faults.kill = "before"
            oracle.before_pass(n, env)
            outcome = {"passes": 0, "killed": 0}
            if rng.random() < 0.1:
                counts["overlapping"] += 1
                other = _provisioner(env.runtime(clock=clock), clock)
                threads = [threading.Thread(target=_run_one, args=(lambda p=p: p, outcome))
                           for p in (containers[0], other)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            else:
                _run_one(lambda first=containers[0]: first, outcome)
            counts["passes"] += outcome["passes"]
            counts["killed"] += outcome["killed"]
            tokens.lose_responses(0)
            faults.end_pass()
            oracle.observe(n, env)
            ready = [i for i in oracle.instances() if i.state == "running"
                     and n - oracle.launched_pass.get(i.instance_id, n) >= KUBELET_DELAY_PASSES]
            env.register_nodes(bind=False, instances=ready)
            env.schedule_pods()
            clock.shift += SECONDS_PER_PASS
        # Settle without faults: a minute later, every claim is adopted, resumed or finished.
        clock.shift += 120.0
        for n in range(passes, passes + 3):
            oracle.before_pass(n, env)
            _provisioner(env.runtime(clock=clock), clock).run_pass(reason="settle")
            oracle.observe(n, env)
            env.register_nodes(bind=False, instances=[i for i in oracle.instances() if i.state == "running"])
            env.schedule_pods()
        verdict = oracle.verdict()
        pending = len(env.pending_pods())
    return {"benchmark": "provisioner_soak", "seed": seed, "passesRequested": passes, **counts,
            "cpuLimit": CPU_LIMIT, "pendingAtEnd": pending, "tokenReplays": tokens.replayed,
            "tokenMismatches": tokens.mismatched, **verdict, "wallSeconds": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    print(json.dumps(run(passes=args.passes, seed=args.seed)))


if __name__ == "__main__":
    main()
