"""A whole provisioner pass at scale, through the real handler, phase by phase, with an estimate for Lambda.

Each case (pending pods x existing nodes) runs in a fresh process that measures only the autoscaler: moto (as a
server) and the Kubernetes API emulator run in a child process, seeded there with the pending pods (Karpenter's
five-class mix: plain, zone spread, hostname spread, zone self-affinity, hostname anti-affinity, each pod wrapped
by ``benchmarks/_realistic.py`` in everything kube-apiserver returns for a Deployment's, StatefulSet's or Job's
pod: 4.5-9 KB each, median ~6 KB, managedFields included), the existing nodes (owned, registered and initialised
instances with their kubelet's status: images, addresses, node info; each with running pods, realistic too) and
their EC2 instances. moto is made as strict as the services where scale depends on it
(``simulator/moto_strict.py``): DescribeInstances pages by instance, at most 1,000 a page, and DynamoDB refuses
writes past 1,000 write units a second per partition-key value (the run reports the units charged and any write
refused). The measuring process builds the runtime as a Lambda container would, invokes the provisioner handler
once (scheduled mode: a new container's first pass, which sweeps, listing every owned instance), then again at once
(no node has registered yet and kube-scheduler has bound nothing: that pass must launch nothing, its in-flight
capacity coming from the node claims and the first pass's nominations; ``--bind`` binds the pods the first pass
placed on existing nodes in between, as kube-scheduler would within a second), and reports per phase (gather, plan,
launch, events, lifecycle): wall seconds, CPU seconds of this process, AWS calls by operation and Kubernetes API
requests. moto's slow paths at thousands of instances and claims are patched in its own process
(``simulator/moto_fast.py``).

Latency is injected where the real services would spend it, as sleeps on the calling thread: a botocore
``before-send`` hook per AWS operation (CreateFleet 1.5 s, as EC2 answers instant fleets; other EC2 calls
150 ms, plus an EC2 answer's size at 6 MB/s: ~1 s for a full DescribeInstances page of 1,000 instances;
DynamoDB 10 ms; IAM 100 ms; SSM 50 ms), and per
Kubernetes request 15 ms (an EKS API server round trip from a Lambda in the region) plus the answer's size
at 60 MB/s (a 2,000-pod page of ~10 MB: ~0.18 s, as kube-apiserver serialises and sends it).
Each sleep is recorded with its thread; a phase's latency is the
waiting on its critical path, derived from those records only (``_Latency``): the main thread's waits plus
the longest worker and tagging chains, except within the cluster read (``read_cluster``), whose workers start
with it and are joined at its end, where the longer of the main thread's waits and the workers' chains counts.

The Lambda estimate: Lambda gives a function one vCPU per 1,769 MB, so the provisioner at the memory size
the stack deploys (``provisioner.memoryMb``'s default, read from the config model) gets ``memory / 1769``
of an arm64 (Graviton) vCPU, assumed as fast as one core of this machine for this pure-Python work (not
measured on Lambda: stated in the output). ``estimate = (cpu + tls) / share + latency``: CPU time of this
process (all threads, with the production Powertools metrics sink writing its EMF lines), TLS's cost that a
local plain-HTTP run does not pay (1 CPU-second per GiB received, as AES-GCM plus record handling costs
Python's ssl module), and the latency not overlapped with CPU work (an upper bound). Periodic refreshes of
the instance catalogue and spot prices are not in a pass here (they are cached across passes; the
first pass of a cold container pays them). moto's and the emulator's own processing (another process here, the
service's side on AWS) and other load on this machine are in the wall time only, never in the estimate. The
container's time windows between the passes (the warm cache's resync, nominations, the sweep cadence) are
stretched by ``TIME_STRETCH``, since this machine stretches a pass's wall time far beyond its estimate (stated).
``BENCH_PROFILE=1`` (or ``second``) prints the first (second) pass's profile to stderr.
Prints ONE JSON object; ``--combine`` prints the table of cases run as separate processes.

    python -m benchmarks.provisioner_pass [--sizes 1000,5000,20000,50000] [--nodes 0,2000]
    python -m benchmarks.provisioner_pass --case 50000 --existing 2000     # one case, one process
    python -m benchmarks.provisioner_pass --combine a.json b.json        # the table of separate runs
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import logging
import multiprocessing as mp
import os
import pstats
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from benchmarks._offline import stdout_to_stderr  # noqa: E402
from benchmarks._realistic import realistic_node, realistic_pod, size_summary  # noqa: E402

LAMBDA_MB_PER_VCPU = 1769  # Lambda: one full vCPU at 1,769 MB, proportionally less below
KUBE_LATENCY = 0.015
KUBE_BYTES_PER_SECOND = 60e6  # kube-apiserver serialising and sending a list page to a Lambda in the region
TLS_CPU_SECONDS_PER_GIB = 1.0  # decrypting what the function receives (a local run speaks plain HTTP)
INSTANCE_PROFILE = "bench-nodes"  # as infra/identity.py creates one per cluster
AWS_LATENCY = {"ec2.CreateFleet": 1.5, "ec2": 0.15, "dynamodb": 0.01, "iam": 0.1, "ssm": 0.05}
# EC2 answers a full DescribeInstances page (1,000 instances, ~5 MB of XML) in about a second: the round trip
# above plus the answer's size at this rate, spent when the answer arrives.
EC2_BYTES_PER_SECOND = 6e6
# BENCH_PROFILE=1 (or =second): the first (second) pass's main-thread profile (by own time) goes to stderr; it
# slows the pass.
PROFILE = {"1": "first", "first": "first", "second": "second"}.get(os.environ.get("BENCH_PROFILE", ""), "")
# How much longer the container's time windows are here than on Lambda (assumptions()["timeWindows"]).
TIME_STRETCH = 20.0
TARGETS = {"estimate50kWith2000Nodes": 30.0, "peakShareOfMemory50k": 0.6, "secondPass50kWith2000Nodes": 10.0,
           "estimate1k": 4.0, "kubeRequests50k": 500}
PHASES = ("gather", "plan", "launch", "events", "lifecycle")
EXISTING_TYPE = "m5.2xlarge"
EXISTING_PREFIX = "ip-"  # the seeded existing nodes' names
RUNNING_PER_NODE = 12  # 500m each: 6 of the node's ~7.9 allocatable CPU in use
CPUS = ("100m", "250m", "500m", "1", "1500m")
MEMS = ("100Mi", "256Mi", "1Gi", "2Gi", "4Gi")
KINDS = ("plain", "zone-spread", "hostname-spread", "zone-affinity", "hostname-anti-affinity")

CONFIG = """
clusterName: bench
region: us-east-1
nodePools:
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: default}
    spec:
      template:
        spec:
          nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          requirements:
            - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
            - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["2"]}
            - {key: kubernetes.io/arch, operator: In, values: [amd64]}
            - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      limits: {cpu: 1000000, memory: 4000000Gi}
nodeClasses:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {name: default}
    spec:
      amiSelectorTerms: [{alias: al2023@latest}]
      role: eks-autoscaler-node-bench
      subnetSelectorTerms: [{tags: {karpenter.sh/discovery: bench}}]
      securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: bench}}]
provisioner: {watchMode: false}
"""


def deployed_memory_mb() -> int:
    """The provisioner's memory size as the stack deploys it by default (the cluster file's
    ``provisioner.memoryMb``, else the default reaction's, the watcher's: infra/functions.py)."""
    from autoscaler.config import ProvisionerConfig  # noqa: PLC0415

    return ProvisionerConfig().memory


def cpu_share() -> float:
    return deployed_memory_mb() / LAMBDA_MB_PER_VCPU


def _config_path() -> Path:
    path = Path(tempfile.gettempdir()) / "provisioner-pass-bench.yaml"
    path.write_text(CONFIG)
    return path


# ----- the pods -------------------------------------------------------------------------------------
def pending_pod(i: int, rng: random.Random) -> dict[str, Any]:
    """Pod ``i`` of Karpenter's five-class benchmark mix, as kube-apiserver returns it (``_realistic``)."""
    core = _pending_core(i, rng)
    spec = core["spec"]
    return realistic_pod(i, rng, name=core["metadata"]["name"], labels=core["metadata"]["labels"],
                         resources=spec["containers"][0]["resources"],
                         scheduling={k: v for k, v in spec.items() if k in ("affinity", "topologySpreadConstraints")})


def _pending_core(i: int, rng: random.Random) -> dict[str, Any]:
    """Pod ``i``'s scheduling shape: its requests, labels, spread and affinity terms."""
    kind = KINDS[i % len(KINDS)]
    app = f"bench-{kind}"
    selector = {"matchLabels": {"app": app}}
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "pause", "resources": {
        "requests": {"cpu": rng.choice(CPUS), "memory": rng.choice(MEMS)}}}]}
    if kind.endswith("spread"):
        key = "topology.kubernetes.io/zone" if kind.startswith("zone") else "kubernetes.io/hostname"
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": selector}]
    elif kind == "zone-affinity":
        spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": selector, "topologyKey": "topology.kubernetes.io/zone"}]}}
    elif kind == "hostname-anti-affinity":
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}}
    return {"metadata": {"name": f"{app}-{i:05d}", "namespace": "default", "labels": {"app": app},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                                              "uid": f"uid-{app}", "controller": True}]},
            "spec": spec, "status": {"phase": "Pending"}}


# ----- the child: moto, the emulator and the seeded world -------------------------------------------
def serve(conn: Any, pods: int, existing: int) -> None:
    """Run in the child process: start the servers, seed them, hand their addresses over, wait."""
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    from autoscaler.domain.allocatable import allocatable, capacity  # noqa: PLC0415
    from autoscaler.domain.instance_types import instance_type_from_ec2  # noqa: PLC0415
    from autoscaler.domain.keys import INITIALIZED_LABEL, NODECLAIM_TAG  # noqa: PLC0415
    from autoscaler.domain.labels import node_labels  # noqa: PLC0415
    from autoscaler.domain.ownership import launch_tags  # noqa: PLC0415
    from simulator.local import ZONES, LocalCluster, demo_config, moto_catalog  # noqa: PLC0415
    from simulator.moto_fast import (  # noqa: PLC0415
        cheap_transaction_backups,
        find_instances_directly,
        index_ec2_tags,
    )
    from simulator.moto_strict import page_instances_by_instance, throttle_dynamodb_partitions  # noqa: PLC0415

    # moto's slow paths at thousands of instances and claims, patched in moto's process (never the measured one),
    # and moto made as strict as EC2's paging and DynamoDB's partition limits.
    index_ec2_tags()
    cheap_transaction_backups()
    find_instances_directly()
    page_instances_by_instance()
    throttle, _ = throttle_dynamodb_partitions()
    config = demo_config(_config_path())
    with LocalCluster.start(config) as env:
        # The instance profile the stack creates for the node role and passes to the functions
        # (AUTOSCALER_INSTANCE_PROFILE): a deployed provisioner makes no IAM call to launch.
        iam = env.session.client("iam", region_name=config.region)
        iam.create_instance_profile(InstanceProfileName=INSTANCE_PROFILE)
        iam.add_role_to_instance_profile(InstanceProfileName=INSTANCE_PROFILE, RoleName=config.node_role_name)
        store = env.kube.store
        rng = random.Random(42)
        # Bulk-seeded (no watch history, no copies): the passes list before they watch.
        seeded = [pending_pod(i, rng) for i in range(pods)]
        sample = seeded[:2000]
        store.seed("pods", seeded)
        seeded_nodes: list[dict[str, Any]] = []
        seeded = []
        if existing:
            infos, _ = moto_catalog()
            it = instance_type_from_ec2(next(i for i in infos if i["InstanceType"] == EXISTING_TYPE))
            alloc, cap = allocatable(it), capacity(it)
            ec2 = env.session.client("ec2", region_name=config.region)
            image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
            made = 0
            for zone in ZONES:
                want = existing // len(ZONES) + (1 if ZONES.index(zone) < existing % len(ZONES) else 0)
                while want:
                    batch = min(want, 250)
                    tags = launch_tags(cluster_name=config.cluster_name, node_pool="default", node_class="default",
                                       claim_id=f"existing-{zone}")
                    tags.pop(NODECLAIM_TAG)
                    res = ec2.run_instances(
                        ImageId=image, InstanceType=EXISTING_TYPE, MinCount=batch, MaxCount=batch,
                        SubnetId=env.network.subnets[zone],
                        TagSpecifications=[{"ResourceType": "instance", "Tags": [
                            {"Key": k, "Value": v} for k, v in tags.items()]}])
                    for inst in res["Instances"]:
                        name = f"ip-{made:05d}.ec2.internal"
                        # Every label the lifecycle step gives a registered node: these nodes are settled.
                        labels = {**node_labels(it, zone=zone, capacity_type="on-demand", node_pool="default"),
                                  "kubernetes.io/hostname": name, INITIALIZED_LABEL: "true",
                                  "karpenter.sh/registered": "true"}
                        seeded_nodes.append(realistic_node({
                            "metadata": {"name": name, "labels": labels},
                            "spec": {"providerID": f"aws:///{zone}/{inst['InstanceId']}"},
                            "status": {"allocatable": {"cpu": f"{alloc['cpu']}m", "memory": str(alloc["memory"]),
                                                       "pods": str(alloc["pods"])},
                                       "capacity": {"cpu": f"{cap['cpu']}m", "memory": str(cap["memory"]),
                                                    "pods": str(cap["pods"])},
                                       "conditions": [{"type": "Ready", "status": "True"}]}}, rng))
                        for j in range(RUNNING_PER_NODE):
                            seeded.append(realistic_pod(
                                made * RUNNING_PER_NODE + j, rng, name=f"running-{made:05d}-{j:02d}",
                                labels={"app": f"running-{j}"}, node_name=name,
                                resources={"requests": {"cpu": "500m", "memory": "512Mi"}}))
                        made += 1
                    want -= batch
            store.seed("nodes", seeded_nodes)
            store.seed("pods", seeded)
        conn.send({"endpoint": env.endpoint, "kube": env.kube.url, "catalogLoaded": True,
                   "podSizes": size_summary(sample)})
        while conn.recv() == "stats":  # until the measuring process is done
            conn.send(throttle.stats())


# ----- the measuring process ------------------------------------------------------------------------
def _kube_requests(url: str) -> Counter[str]:
    with urllib.request.urlopen(f"{url}/_emulator/stats", timeout=30) as answer:
        return Counter(json.loads(answer.read())["requests"])


class _Latency:
    """The waiting a real service would add, spent as sleeps on the calling thread and recorded per thread.

    A phase's latency is the waiting on its critical path, from the recorded sleeps alone (so moto's and
    the emulator's own processing, and other load on this machine, cannot inflate it): the main thread's
    waits, plus the longest chain of waits on one worker thread of the launch (or Event) pool, plus the
    longest chain on one tagging thread. That is an upper bound: the longest worker chain and the longest
    tagging chain may belong to different launch groups."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[tuple[float, int, bool, float]] = []  # (start, thread, tagging, seconds)
        self.reads: list[tuple[float, float]] = []  # the cluster reads' windows (``read``)
        self._threads = 0
        self.received = 0  # bytes of every answer (Kubernetes and AWS): what TLS would have decrypted

    def receive(self, size: int) -> None:
        with self._lock:
            self.received += size

    def _thread(self) -> int:
        current = threading.current_thread()
        if current is threading.main_thread():
            return 0
        tid: int | None = getattr(current, "_bench_id", None)
        if tid is None:
            with self._lock:
                self._threads += 1
                tid = self._threads
            current._bench_id = tid  # type: ignore[attr-defined]
        return tid

    def spend(self, seconds: float, *, tagging: bool = False) -> None:
        start = time.perf_counter()
        tid = self._thread()
        time.sleep(seconds)
        with self._lock:
            self._calls.append((start, tid, tagging, seconds))

    def within(self, t0: float, t1: float) -> float:
        main, pools = self.split(t0, t1)
        return main + pools

    def read(self, t0: float, t1: float) -> None:
        """[t0, t1] was the cluster read (``read_cluster``): its worker threads started at its start and were
        joined at its end, so their waits ran beside the main thread's (``critical``)."""
        with self._lock:
            self.reads.append((t0, t1))

    def critical(self, t0: float, t1: float) -> tuple[float, float]:
        """(the waits on the critical path of [t0, t1], the main thread's waits in it). Outside a cluster read,
        the main thread's waits plus the longest worker and tagging chains (as ``within``). Within one, a worker
        started with the read and joined at its end, so the read lasts at most the longer of the main thread's
        waits there and the longest chain of waits started in it, plus the CPU (``estimate`` adds it for every
        thread): the listing of EC2 instances and the small Kubernetes collections overlap the pod pages."""
        with self._lock:
            calls = [c for c in self._calls if t0 <= c[0] < t1]
            reads = [(a, b) for a, b in self.reads if t0 <= a < t1]
        main_in = main_out = 0.0
        # Worker and tagging chains per thread, apart for waits started within a read and outside one.
        chains: dict[bool, tuple[Counter[int], Counter[int]]] = {True: (Counter(), Counter()),
                                                                 False: (Counter(), Counter())}
        for start, tid, tagging, seconds in calls:
            within = any(a <= start < b for a, b in reads)
            if tid == 0:
                if within:
                    main_in += seconds
                else:
                    main_out += seconds
            else:
                chains[within][1 if tagging else 0][tid] += seconds
        pools = {key: max(workers.values(), default=0.0) + max(taggers.values(), default=0.0)
                 for key, (workers, taggers) in chains.items()}
        path = main_out + pools[False] + max(main_in, pools[True])
        return path, main_in + main_out

    def overlapped(self, t0: float, t1: float) -> float:
        """The time within [t0, t1] during which at least one request was waiting: requests that really
        overlapped (on different threads, by their recorded start and length) count once, requests one
        after another add up. Never more than ``within``, which adds a worker chain to the main thread's
        waits even when they ran at the same time."""
        with self._lock:
            spans = sorted((max(t0, c[0]), min(t1, c[0] + c[3])) for c in self._calls if t0 <= c[0] < t1)
        total, end = 0.0, t0
        for start, stop in spans:
            if stop > end:
                total += stop - max(start, end)
                end = stop
        return total

    def split(self, t0: float, t1: float) -> tuple[float, float]:
        """(the main thread's waits, the longest worker chain plus the longest tagging chain)."""
        main, workers, taggers = 0.0, Counter[int](), Counter[int]()
        with self._lock:
            calls = [c for c in self._calls if t0 <= c[0] < t1]
        for _, tid, tagging, seconds in calls:
            if tid == 0:
                main += seconds
            elif tagging:
                taggers[tid] += seconds
            else:
                workers[tid] += seconds
        return main, max(workers.values(), default=0.0) + max(taggers.values(), default=0.0)


def _install_latency(session: Any, latency: _Latency, calls: Counter[str]) -> None:
    def before_send(request: Any, event_name: str, **_: Any) -> None:
        _, service, operation = event_name.split(".", 2)
        calls[f"{service}.{operation}"] += 1
        delay = AWS_LATENCY.get(f"{service}.{operation}", AWS_LATENCY.get(service, 0.0))
        if delay:
            latency.spend(delay, tagging=operation == "CreateTags")

    def before_parse(response_dict: Any = None, event_name: str = "", **_: Any) -> None:
        body = (response_dict or {}).get("body")
        if isinstance(body, bytes | bytearray):
            latency.receive(len(body))
            if ".ec2." in f"{event_name}.":
                latency.spend(len(body) / EC2_BYTES_PER_SECOND)

    session.events.register("before-send", before_send)
    session.events.register("before-parse", before_parse)
    from autoscaler.adapters.kube.cluster import KubeCluster  # noqa: PLC0415

    send = KubeCluster._send

    def slow_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = send(self, *args, **kwargs)
        read = getattr(answer, "read", None)  # a RESTResponse (the body is loaded; read() keeps it)
        watch = any(k == "watch" for k, _ in kwargs.get("query") or ())  # a stream: never read it here
        size = len(read() or b"") if read is not None and not watch else 0
        latency.receive(size)
        latency.spend(KUBE_LATENCY + size / KUBE_BYTES_PER_SECOND)  # the round trip, then the answer's transfer
        return answer

    KubeCluster._send = slow_send  # type: ignore[method-assign]
    from autoscaler.adapters.kube.informer import CacheSettings  # noqa: PLC0415

    watch_raw, quiet = KubeCluster.watch_raw, CacheSettings().quiet_seconds

    def slow_watch(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The warm cache's catch-up watch (it opens its stream without ``_send``): one request, plus the quiet
        # window a node catch-up waits out on a real API server (the emulator's own wait is not counted).
        if kwargs.get("quiet_seconds") is not None:  # not the watcher's own watch (its list is already slowed)
            latency.spend(KUBE_LATENCY + (quiet if kwargs["quiet_seconds"] == quiet else 0.0))
        return watch_raw(self, *args, **kwargs)

    KubeCluster.watch_raw = slow_watch  # type: ignore[method-assign]


class _GcTime:
    """CPU seconds of the cyclic GC's collections (``gc.callbacks``, the collecting thread's CPU time): part of
    the CPU time, reported so a phase's collections can be told from its own work."""

    def __init__(self) -> None:
        self.seconds, self._start = 0.0, 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._start


class _Phases:
    """Wall, CPU and latency seconds, AWS calls and Kubernetes requests of each phase of the passes."""

    def __init__(self, kube_url: str, aws_calls: Counter[str], latency: _Latency) -> None:
        self.kube_url, self.aws_calls, self.latency = kube_url, aws_calls, latency
        self.rows: dict[str, dict[str, Any]] = {}
        self.gc = _GcTime()

    def wrap(self, cls: Any, method: str, phase: str) -> None:
        inner: Callable[..., Any] = getattr(cls, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            k0, a0 = _kube_requests(self.kube_url), Counter(self.aws_calls)
            w0, c0, g0 = time.perf_counter(), time.process_time(), self.gc.seconds
            try:
                return inner(*args, **kwargs)
            finally:
                w1, c1 = time.perf_counter(), time.process_time()
                k1 = _kube_requests(self.kube_url)
                row = self.rows.setdefault(phase, {"wall": 0.0, "cpu": 0.0, "latency": 0.0, "main": 0.0,
                                                   "gc": 0.0, "aws": Counter(), "kube": Counter()})
                row["wall"] += w1 - w0
                row["cpu"] += c1 - c0
                row["gc"] += self.gc.seconds - g0
                path, main = self.latency.critical(w0, w1)
                row["latency"] += path
                row["main"] += main
                row["aws"].update(Counter(self.aws_calls) - a0)
                row["kube"].update(k1 - k0)
                row["peakMiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the peak so far

        setattr(cls, method, timed)

    def take(self) -> dict[str, dict[str, Any]]:
        rows, self.rows = self.rows, {}
        return rows


def _bind(kube_url: str, placements: dict[str, str]) -> int:
    """Bind pods to nodes through the emulator's pods/binding subresource (as kube-scheduler does)."""
    def bind(item: tuple[str, str]) -> bool:
        key, node = item
        namespace, name = key.split("/", 1)
        body = json.dumps({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": node}}).encode()
        request = urllib.request.Request(f"{kube_url}/api/v1/namespaces/{namespace}/pods/{name}/binding",
                                         data=body, method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            return 200 <= answer.status < 300

    with ThreadPoolExecutor(max_workers=8) as pool:
        return sum(pool.map(bind, sorted(placements.items())))


def _estimate(cpu: float, latency: float) -> float:
    """Seconds on the deployed Lambda: its CPU share stretches the CPU time (TLS included by the caller);
    the services' latency adds (not overlapped with the CPU work: an upper bound)."""
    return cpu / cpu_share() + latency


def _pass_report(answer: dict[str, Any], rows: dict[str, dict[str, Any]], *, wall: float, cpu: float,
                 latency: float, kube: Counter[str], received: int) -> dict[str, Any]:
    phases = {}
    for name in PHASES:
        row = rows.get(name)
        if row is None:
            continue
        phases[name] = {"wall": round(row["wall"], 3), "cpu": round(row["cpu"], 3), "gcSeconds": round(row["gc"], 3),
                        "latency": round(row["latency"], 3),
                        "estimate": round(_estimate(row["cpu"], row["latency"]), 2),
                        "awsCalls": dict(sorted(row["aws"].items())), "kubeRequests": sum(row["kube"].values()),
                        "peakMiBAfter": round(row.get("peakMiB", 0.0), 1)}
    passes = answer.get("passes") or [{}]
    first = passes[0]
    tls = received / 2**30 * TLS_CPU_SECONDS_PER_GIB
    return {"wall": round(wall, 3), "cpu": round(cpu, 3), "tlsCpu": round(tls, 3), "latency": round(latency, 3),
            "receivedMiB": round(received / 2**20, 1),
            "estimate": round(_estimate(cpu + tls, latency), 2),
            "instancesLaunched": first.get("launchedCount", len(first.get("launched") or ())),
            "unschedulable": first.get("unschedulableCount", 0), "failures": len(first.get("failures") or ()),
            "failureSamples": list(first.get("failures") or ())[:3],
            "resumed": len((first.get("claims") or {}).get("resumed") or ()),
            "eventsSuppressed": first.get("eventsSuppressed", 0),
            "kubeRequests": sum(kube.values()), "kubeRequestsByVerb": dict(sorted(kube.items())),
            "phases": phases}


def run_case(pods: int, existing: int, *, bind: bool = False) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=serve, args=(child, pods, existing), daemon=True)
    server.start()
    seeded = time.perf_counter()
    while not parent.poll(1.0):
        if not server.is_alive():
            raise RuntimeError(f"the moto/emulator process exited ({server.exitcode}) before it was ready")
    info = parent.recv()
    seed_seconds = time.perf_counter() - seeded
    try:
        out = _measure(pods, existing, info, bind=bind) | {"seedSeconds": round(seed_seconds, 1),
                                                "pendingPodSizes": info["podSizes"]}
        parent.send("stats")
        out["dynamodb"] = parent.recv()
        return out
    finally:
        parent.send("stop")
        server.join(timeout=60)


def bench_session(region: str) -> tuple[Any, _Latency, Counter[str]]:
    """The measured process's boto3 session: patient clients, the bundled prices, EC2's client-token
    idempotency and the injected latency (what it waited, per thread, and the calls by operation)."""
    import boto3  # noqa: PLC0415
    from botocore.config import Config  # noqa: PLC0415

    from autoscaler.adapters.aws import cloud  # noqa: PLC0415
    from autoscaler.handlers import runtime as runtime_module  # noqa: PLC0415
    from simulator.ec2_tokens import ClientTokens  # noqa: PLC0415
    from simulator.local import install_price_data  # noqa: PLC0415

    # moto answers a page of 1,000 instances in seconds (EC2 in well under one): give it the time, or the
    # benchmark would measure moto's read timeouts instead of the pass.
    # moto applies one request at a time, so a DynamoDB write may wait behind a CreateFleet of 200 instances.
    configured = cloud.client_config
    patient = lambda **kw: configured(**kw).merge(Config(read_timeout=300))  # noqa: E731
    cloud.client_config = patient  # type: ignore[assignment]
    runtime_module.client_config = patient  # type: ignore[attr-defined]
    session = boto3.Session(region_name=region)
    install_price_data(session, region=region)
    ClientTokens().install(session.events)
    aws_calls: Counter[str] = Counter()
    latency = _Latency()
    _install_latency(session, latency, aws_calls)
    return session, latency, aws_calls


def bench_environ(info: dict[str, Any]) -> dict[str, str]:
    """The function's environment as the stack sets it (the emulator and claims table of the child)."""
    from autoscaler.config import ENV_CLAIMS_TABLE, ENV_INSTANCE_PROFILE  # noqa: PLC0415
    from autoscaler.handlers.runtime import ENV_KUBE_ENDPOINT  # noqa: PLC0415
    from simulator.local import CLAIMS_TABLE  # noqa: PLC0415

    return {ENV_KUBE_ENDPOINT: info["kube"], ENV_CLAIMS_TABLE: CLAIMS_TABLE, ENV_INSTANCE_PROFILE: INSTANCE_PROFILE}


def _measure(pods: int, existing: int, info: dict[str, Any], *, bind: bool = False) -> dict[str, Any]:
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    os.environ.update({"AWS_ENDPOINT_URL": info["endpoint"], "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_METRICS_NAMESPACE": "bench", "POWERTOOLS_SERVICE_NAME": "provisioner"})

    from autoscaler.adapters.clock import SystemClock  # noqa: PLC0415
    from autoscaler.app import provisioner as provisioner_module  # noqa: PLC0415
    from autoscaler.app.provisioner import Provisioner  # noqa: PLC0415
    from autoscaler.handlers.provisioner import handler, provisioner_for  # noqa: PLC0415
    from autoscaler.handlers.runtime import build_runtime, set_runtime  # noqa: PLC0415
    from simulator.local import (  # noqa: PLC0415
        LambdaContext,
        demo_config,
        moto_catalog,
    )

    config = demo_config(_config_path())
    session, latency, aws_calls = bench_session(config.region)
    phases = _Phases(info["kube"], aws_calls, latency)
    planned: list[dict[str, Any]] = []  # what each pass launched for: a sample, to tell why a second pass launches
    launch = Provisioner._launch

    onto_existing: dict[str, str] = {}  # pod key -> existing node, as the first pass planned

    def sampled(self: Any, plan: Any, *args: Any, **kwargs: Any) -> Any:
        if not onto_existing:
            onto_existing.update({k: n for k, n in plan.existing.items() if n.startswith(EXISTING_PREFIX)})
        planned.clear()
        planned.extend({"pods": list(lc.pods[:6]), "podCount": len(lc.pods), "zones": list(lc.zones),
                        "instanceTypes": list(lc.instance_types[:3])} for lc in plan.launches[:5])
        return launch(self, plan, *args, **kwargs)

    Provisioner._launch = sampled  # type: ignore[method-assign]
    read_cluster = provisioner_module.read_cluster

    def timed_read(*args: Any, **kwargs: Any) -> Any:
        r0 = time.perf_counter()
        try:
            return read_cluster(*args, **kwargs)
        finally:
            latency.read(r0, time.perf_counter())

    provisioner_module.read_cluster = timed_read  # type: ignore[assignment]
    for method, phase in (("_gather", "gather"), ("_plan", "plan"), ("_launch", "launch"),
                          ("_nominate", "events"), ("_lifecycle", "lifecycle")):
        phases.wrap(Provisioner, method, phase)
    # The production metrics sink (Powertools, EMF lines to stdout: here stderr), as the handler's runtime builds it.
    rt = build_runtime(config=config, environ=bench_environ(info), session=session, clock=SystemClock())
    rt.cloud.catalog.load(*moto_catalog(config.region))
    set_runtime(rt)
    # The container's time windows, stretched as this machine stretches a pass (assumptions()["timeWindows"]).
    cache = rt.cluster_cache()
    cache.settings = replace(cache.settings, resync_seconds=cache.settings.resync_seconds * TIME_STRETCH)
    provisioner_module.SWEEP_SECONDS *= TIME_STRETCH
    service = provisioner_for(rt, dry_run=False)
    service.nominations.seconds *= TIME_STRETCH
    event = {"source": "schedule", "kind": "provisioner", "watch": False}
    out: dict[str, Any] = {"pendingPods": pods, "existingNodes": existing}
    for label in ("first", "second"):
        if label == "second" and bind:
            # kube-scheduler's part, between the passes (--bind): it binds the pods that fit existing nodes within
            # a second (here no scheduler runs). Without it, the second pass runs as it would when kube-scheduler
            # has not bound them yet: either way it must launch nothing, for those pods or for the ones waiting
            # for the first pass's new nodes, which no node has registered for yet.
            out["boundToExistingNodes"] = _bind(info["kube"], onto_existing)
        k0, b0 = _kube_requests(info["kube"]), latency.received
        w0, c0 = time.perf_counter(), time.process_time()
        profiler = cProfile.Profile() if label == PROFILE else None
        if profiler is not None:
            profiler.enable()
        answer = handler(dict(event), LambdaContext(remaining_ms=900_000, function_name="provisioner"))
        if profiler is not None:
            profiler.disable()
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(60)
        w1, cpu = time.perf_counter(), time.process_time() - c0
        rows = phases.take()
        # The whole pass: each phase's critical path, plus the main thread's waits outside the phases.
        waited = latency.split(w0, w1)[0] - sum(row["main"] for row in rows.values()) + sum(
            row["latency"] for row in rows.values())
        out[f"{label}Pass"] = report = _pass_report(answer, rows, wall=w1 - w0, cpu=cpu, latency=waited,
                                                    kube=_kube_requests(info["kube"]) - k0,
                                                    received=latency.received - b0)
        report["clusterCache"] = _cache_stats(rt)
        if label == "second" and planned:
            out["secondPass"]["launchedFor"] = list(planned)
    out["peakMiB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out["peakShareOfMemory"] = round(out["peakMiB"] / deployed_memory_mb(), 3)
    out["loadAverage"] = [round(x, 2) for x in os.getloadavg()]
    return out


def _cache_stats(rt: Any) -> dict[str, Any]:
    """What the warm cluster cache did so far: lists per collection, watch requests, events applied."""
    stats = rt.cluster_cache().stats
    return {"lists": dict(stats.lists), "watches": stats.watches, "events": stats.events}


def assumptions() -> dict[str, Any]:
    """Every assumption behind the estimate, as printed with it."""
    from simulator.moto_strict import EC2_MAX_RESULTS, PARTITION_WCU_PER_SECOND  # noqa: PLC0415

    share = cpu_share()
    return {
        "provisionerMemoryMb": deployed_memory_mb(), "lambdaMbPerVcpu": LAMBDA_MB_PER_VCPU,
        "lambdaCpuShare": round(share, 3),
        "architecture": "arm64 (Graviton) vCPU assumed as fast as one core of this machine for this pure-Python "
                        "work; not measured on Lambda",
        "estimate": f"(cpu + tlsCpu) / {share:.3f} + latency (critical path of the injected waits: per phase the "
                    "main thread's waits plus the longest worker and tagging chains; within the cluster read, "
                    "whose workers start with it and are joined at its end, the longer of the main thread's "
                    "waits and the longest worker chain)",
        "gcSeconds": "per phase: CPU seconds of the cyclic GC's collections (part of cpu)",
        "awsLatencySeconds": AWS_LATENCY, "ec2BytesPerSecond": EC2_BYTES_PER_SECOND,
        "kubeLatencySeconds": KUBE_LATENCY,
        "kubeBytesPerSecond": KUBE_BYTES_PER_SECOND, "tlsCpuSecondsPerGiB": TLS_CPU_SECONDS_PER_GIB,
        "ec2DescribeInstancesPageSize": EC2_MAX_RESULTS[1],
        "dynamodbWcuPerPartitionPerSecond": PARTITION_WCU_PER_SECOND,
        "pods": "benchmarks/_realistic.py: Deployment/StatefulSet/Job pods as kube-apiserver returns them "
                "(managedFields, env, probes, projected token volume, default tolerations, status); "
                "each case reports its pending pods' sizes",
        "metricsSink": "production PowertoolsSink (EMF)",
        "timeWindows": f"the warm cache's resync (300 s), nominations (60 s) and the sweep cadence (SWEEP_SECONDS) are "
                       f"stretched x{TIME_STRETCH:g} here: moto, the emulator and this shared machine stretch a "
                       "50k pass's wall time to minutes, where on Lambda the second pass starts within the first's "
                       "estimate of it; unstretched, the second pass would list the cluster again and plan the "
                       "nominated pods afresh only because this machine is slow",
        "sweep": "the first pass (a new container) sweeps: it lists every owned instance; the second, within "
                 "SWEEP_SECONDS of it, takes in-flight capacity from the node claims alone",
        "notModelled": "periodic instance-catalogue and spot-price refreshes (cached across passes); the "
                       "table-wide throughput of a new on-demand table",
        "machine": "CPU seconds are this process's; load average is reported per case (a shared machine "
                   "inflates wall time more than CPU time)",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000,50000")
    parser.add_argument("--nodes", default="0,2000")
    parser.add_argument("--case", type=int, help="run one case in this process (pending pods)")
    parser.add_argument("--existing", type=int, default=0)
    parser.add_argument("--bind", action="store_true",
                        help="bind the pods the first pass placed on existing nodes before the second pass")
    parser.add_argument("--combine", nargs="+", metavar="FILE",
                        help="print the table of earlier runs' outputs together (cases run as separate processes)")
    args = parser.parse_args(argv)
    if args.combine:
        cases = [c for f in args.combine for c in json.loads(Path(f).read_text())["cases"]]
        print(json.dumps(summary(cases)))
        return 0
    if args.case is not None:
        # The handler's log lines and EMF metrics go to stdout, as on Lambda: here stdout is the JSON only.
        with stdout_to_stderr():
            result = run_case(args.case, args.existing, bind=args.bind)
        print(json.dumps(result))
        return 0
    cases = []
    for existing in (int(n) for n in args.nodes.split(",")):
        for pods in (int(s) for s in args.sizes.split(",")):
            done = subprocess.run([sys.executable, "-m", "benchmarks.provisioner_pass", "--case", str(pods),
                                   "--existing", str(existing), *(["--bind"] if args.bind else [])],
                                  capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[1])
            if done.returncode != 0:
                cases.append({"pendingPods": pods, "existingNodes": existing, "error": done.stderr[-2000:]})
                continue
            cases.append(json.loads(done.stdout))
    print(json.dumps(summary(cases)))
    return 0


def summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """The printed object: the assumptions, the targets checked against the cases, the cases."""
    by = {(c["pendingPods"], c["existingNodes"]): c for c in cases if "error" not in c}
    checks: dict[str, Any] = {}
    if (50000, 2000) in by:
        c = by[(50000, 2000)]
        checks["estimate50kWith2000Nodes"] = {"got": c["firstPass"]["estimate"],
                                              "target": TARGETS["estimate50kWith2000Nodes"]}
        checks["peakShareOfMemory50k"] = {"got": c["peakShareOfMemory"], "target": TARGETS["peakShareOfMemory50k"]}
        checks["secondPass50kWith2000Nodes"] = {"got": c["secondPass"]["estimate"],
                                                "target": TARGETS["secondPass50kWith2000Nodes"]}
        checks["dynamodbThrottledWrites50k"] = {"got": c["dynamodb"]["throttledWrites"], "target": 0}
        checks["kubeRequests50k"] = {"got": c["firstPass"]["kubeRequests"], "target": TARGETS["kubeRequests50k"]}
    if (1000, 0) in by:
        checks["estimate1k"] = {"got": by[(1000, 0)]["firstPass"]["estimate"], "target": TARGETS["estimate1k"]}
    checks["secondPassLaunchesNothing"] = {"got": {f"{p}x{n}": c["secondPass"]["instancesLaunched"]
                                                   for (p, n), c in sorted(by.items())}, "target": 0}
    for check in checks.values():
        got = check["got"]
        check["met"] = all(v == 0 for v in got.values()) if isinstance(got, dict) else got <= check["target"]
    return {"assumptions": assumptions(), "targets": checks, "cases": cases}


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
