"""A local stand-in for an EKS cluster and its AWS account: moto as a server (`SerialMotoServer` on
127.0.0.1, boto3 pointed at it through ``AWS_ENDPOINT_URL``) and the Kubernetes API emulator, with
what the autoscaler needs to find in them (a VPC with discovery-tagged subnets and security group,
the node role, the EKS AMI SSM parameters) and the real handlers wired to both.

Used by ``make demo``, the end-to-end tests and the benchmarks::

    with LocalCluster.start() as env:          # or LocalCluster.start(config=..., catalog=...)
        env.scale("inflate", 5)                # 5 pending pause pods requesting 1 CPU each
        result = env.invoke_provisioner()      # the real handler, scheduled-only by default
        env.register_nodes()                   # launched instances become Ready nodes (still tainted)
        env.invoke_provisioner()               # lifecycle removes karpenter.sh/unregistered
        env.schedule_pods()                    # pods bind where kube-scheduler would bind them
        env.scale("inflate", 0)

What moto lacks is supplied at the boto3 boundary with botocore events on the harness's session:
``pricing:GetProducts`` answers from ``simulator/data/ec2-on-demand-prices.json`` (us-east-1), and
``DescribeSpotPriceHistory`` (moto answers a flat $0.00001) with a deterministic spot price per type
and zone (on-demand x a per-family discount), so instance selection is realistic. There are no
workload controllers in the emulator: ``scale`` creates and deletes a Deployment's pods itself.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import logging
import os
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import boto3
import moto
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.server import ThreadedMotoServer
from moto.ssm.models import Parameter, ssm_backends

from autoscaler.adapters.aws.claims import create_table
from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.informer import ClusterCache
from autoscaler.app.ports import Clock
from autoscaler.config import ENV_CLAIMS_TABLE, ClusterConfig, load_cluster_config
from autoscaler.handlers.runtime import ENV_KUBE_ENDPOINT, Runtime, build_runtime, set_runtime
from autoscaler.metrics_catalog import MetricsSink, RecordingSink
from simulator import eks_node
from simulator.botocore_models import one_loader_per_process
from simulator.ec2_groups import install_launch_template_groups
from simulator.ec2_instance import NODEPOOL_TAG, Ec2Instance, ec2_instance
from simulator.ec2_reservations import CapacityReservationStub
from simulator.ec2_tokens import ClientTokens
from simulator.kube_api import KubeApiServer
from simulator.kube_inprocess import install as install_in_process
from simulator.moto_server import MOTO_LOCK, SerialMotoServer

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
LIVE_STATES = ("pending", "running")
REGION = "us-east-1"  # the region the bundled price data covers
CLAIMS_TABLE = "autoscaler-node-claims"
REPO = Path(__file__).resolve().parents[1]
BUNDLED_PRICES = Path(__file__).with_name("data") / "ec2-on-demand-prices.json"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
PAUSE_IMAGE = "public.ecr.aws/eks-distro/kubernetes/pause:3.7"
Catalog = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def moto_catalog(region: str = REGION) -> Catalog:
    """moto's instance types and zone offerings (the real EC2 data it ships), read from its package
    data: DescribeInstanceTypes over HTTP for ~1,400 types takes seconds, this takes milliseconds."""
    base = Path(moto.__file__).parent / "ec2" / "resources"
    with gzip.open(base / "instance_types.json.gz", "rt", encoding="utf-8") as fh:
        infos = list(json.load(fh).values())
    with gzip.open(base / "instance_type_offerings" / "availability-zone" / f"{region}.json.gz", "rt",
                   encoding="utf-8") as fh:
        offerings = json.load(fh)
    return infos, offerings


def prices_file() -> Path:
    """The EC2 on-demand price data: ``$AUTOSCALER_SHARED_DATA``, else ``shared/data`` beside the
    repository (or above it, for git worktrees), else the copy bundled in ``simulator/data`` so a lone
    clone works too."""
    env = os.environ.get("AUTOSCALER_SHARED_DATA")
    if env:
        return Path(env) / BUNDLED_PRICES.name
    for parent in REPO.parents:
        candidate = parent / "shared" / "data" / BUNDLED_PRICES.name
        if candidate.is_file():
            return candidate
    return BUNDLED_PRICES


def on_demand_prices(region: str = REGION) -> dict[str, float]:
    data = json.loads(prices_file().read_text())
    return {k: float(v) for k, v in data["regions"][region].items()}


@functools.cache
def spot_price(instance_type: str, zone: str, on_demand: float) -> float:
    """Deterministic synthetic spot price: 55-75 % off on-demand by family, +1 % per zone letter (remembered:
    every DescribeSpotPriceHistory of a simulation asks for hundreds of types in every zone)."""
    family = instance_type.split(".", maxsplit=1)[0]
    discount = 0.55 + (int(hashlib.sha256(family.encode()).hexdigest()[:4], 16) % 21) / 100
    return round(on_demand * (1 - discount) * (1 + 0.01 * (ord(zone[-1]) - ord("a"))), 5)


class _Http:
    status_code = 200
    headers: dict[str, str] = {}
    content = b""


def _price_list(on_demand: Mapping[str, float], region: str) -> list[str]:
    out = []
    for name, usd in on_demand.items():
        sku = f"SKU{hashlib.sha256(name.encode()).hexdigest()[:10]}"
        out.append(json.dumps({
            "product": {"productFamily": "Compute Instance", "sku": sku,
                        "attributes": {"instanceType": name, "regionCode": region, "operatingSystem": "Linux"}},
            "terms": {"OnDemand": {sku: {"priceDimensions": {
                sku: {"unit": "Hrs", "pricePerUnit": {"USD": str(usd)}}}}}},
        }))
    return out


def install_price_data(session: boto3.Session, *, region: str = REGION,
                       zones: tuple[str, ...] = ZONES) -> None:
    """Answer pricing:GetProducts and DescribeSpotPriceHistory from the bundled data (moto has no
    Pricing API and flat spot prices). Must run before clients are created from ``session``."""
    prices = on_demand_prices(region)
    price_list = _price_list(prices, region)
    stamp = datetime.now(UTC)

    def get_products(**_: Any) -> tuple[Any, dict[str, Any]]:
        return _Http(), {"PriceList": price_list, "FormatVersion": "aws_v1"}

    def spot_history(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        body = params.get("body") or {}
        wanted = {v for k, v in body.items() if k.startswith("InstanceType.")} or set(prices)
        records = [{"AvailabilityZone": z, "InstanceType": t, "ProductDescription": "Linux/UNIX",
                    "SpotPrice": str(spot_price(t, z, prices[t])), "Timestamp": stamp}
                   for t in sorted(wanted) if t in prices for z in zones]
        return _Http(), {"SpotPriceHistory": records}

    session.events.register("before-call.pricing.GetProducts", get_products)
    session.events.register("before-call.ec2.DescribeSpotPriceHistory", spot_history)


def put_public_parameter(name: str, value: str, *, region: str = REGION) -> None:
    """moto (like AWS) refuses PutParameter under /aws/: seed its backend as it seeds its own."""
    backend = ssm_backends[DEFAULT_ACCOUNT_ID][region]
    backend._parameters[name].append(Parameter(
        account_id=DEFAULT_ACCOUNT_ID, name=name, value=value, parameter_type="String", description=None,
        allowed_pattern=None, keyid=None, last_modified_date=time.time(), version=1, data_type="aws:ec2:image",
    ))


@dataclass
class Network:
    vpc_id: str
    subnets: dict[str, str]
    security_group: str


_IMAGES: dict[str, dict[str, str]] = {}


def _builtin_images(region: str) -> dict[str, str]:
    """One of moto's built-in images per architecture (the same after every reset: looked up once), the first
    of each in the order DescribeImages(Owners=[amazon]) lists them, read from moto's backend in process:
    its answer over HTTP, ~1,300 images serialised, took a second of CPU."""
    if region not in _IMAGES:
        with MOTO_LOCK:
            amis = ec2_backends[DEFAULT_ACCOUNT_ID][region].describe_images(owners=["amazon"])
        images: dict[str, str] = {}
        for ami in amis:
            arch = ami.architecture or ""
            if arch in ("x86_64", "arm64") and arch not in images and ami.state == "available":
                images[arch] = ami.id
        _IMAGES[region] = images
    return _IMAGES[region]


def make_account(session: boto3.Session, config: ClusterConfig, *, region: str = REGION,
                 k8s_version: str = "1.31") -> Network:
    """A VPC with one discovery-tagged subnet per zone and a tagged security group, the node role, and
    the EKS-optimised AMI parameters pointing at moto's built-in images."""
    ec2 = session.client("ec2", region_name=region)
    tag = [{"Key": "karpenter.sh/discovery", "Value": config.cluster_name}]
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = {}
    for i, zone in enumerate(ZONES):
        sid = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{32 * i}.0/19", AvailabilityZone=zone)["Subnet"]["SubnetId"]
        ec2.create_tags(Resources=[sid], Tags=tag)
        subnets[zone] = sid
    sg = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
    ec2.create_tags(Resources=[sg], Tags=tag)
    iam = session.client("iam", region_name=region)
    assume = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]})
    iam.create_role(RoleName=config.node_role_name, AssumeRolePolicyDocument=assume)
    for arch, image in _builtin_images(region).items():
        for name in eks_image_parameters(k8s_version, arch):
            put_public_parameter(name, image, region=region)
    return Network(vpc_id=vpc, subnets=subnets, security_group=sg)


def eks_image_parameters(k8s_version: str, arch: str) -> tuple[str, ...]:
    """The public SSM parameters of the EKS-optimised images the ``@latest`` aliases read (``arch`` as
    EC2 names it: x86_64, arm64)."""
    suffix = "" if arch == "x86_64" else "-arm64"
    return (f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/standard/recommended/image_id",
            f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2{suffix}/recommended/image_id",
            f"/aws/service/bottlerocket/aws-k8s-{k8s_version}/{arch}/latest/image_id")


def publish_image(ec2: Any, *, region: str, k8s_version: str, name: str) -> dict[str, str]:
    """A new EKS-optimised image release: per architecture, a copy of moto's built-in image named ``name``
    (newer than every image before it, so name- and tag-based selector terms pick it too), published
    under the parameters the ``@latest`` aliases read. Returns EC2 architecture -> new image id."""
    out = {}
    for arch, base in _builtin_images(region).items():
        image = ec2.copy_image(SourceImageId=base, SourceRegion=region, Name=f"{name}-{arch}")["ImageId"]
        for parameter in eks_image_parameters(k8s_version, arch):
            put_public_parameter(parameter, image, region=region)
        out[arch] = str(image)
    return out


def demo_config(path: Path | None = None, **overrides: Any) -> ClusterConfig:
    """``clusters/demo.yaml`` moved to the region the bundled prices cover (us-east-1)."""
    config = load_cluster_config(path or REPO / "clusters" / "demo.yaml")
    return config.model_copy(update={"region": REGION, **overrides})


def inflate_pod(name: str, *, app: str = "inflate", cpu: str = "1", namespace: str = "default") -> dict[str, Any]:
    """A pod of the getting-started guides' ``inflate`` Deployment (pause container, 1 CPU)."""
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-5d8f9c",
                                          "uid": f"uid-{app}-rs", "controller": True}]},
        "spec": {"containers": [{"name": app, "image": PAUSE_IMAGE,
                                 "resources": {"requests": {"cpu": cpu}}}],
                 "terminationGracePeriodSeconds": 0},
        "status": {"phase": "Pending"},
    }


@dataclass
class LambdaContext:
    """The few fields of the Lambda context object the handlers read."""

    function_name: str = "provisioner"
    aws_request_id: str = "local-request"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:provisioner"
    remaining_ms: int = 60_000
    # What the remaining time is measured on: the wall clock, or a simulation's virtual clock (a handler's
    # deadline must not depend on how busy the machine running the simulation is).
    monotonic: Callable[[], float] = time.monotonic
    _started: float | None = None

    def __post_init__(self) -> None:
        if self._started is None:
            self._started = self.monotonic()

    def get_remaining_time_in_millis(self) -> int:
        started = self.monotonic() if self._started is None else self._started
        return max(0, int(self.remaining_ms - (self.monotonic() - started) * 1000))


def _lazy_ec2(session: boto3.Session) -> Callable[[], Any]:
    made: list[Any] = []

    def client() -> Any:
        if not made:
            made.append(session.client("ec2"))
        return made[0]
    return client


@dataclass
class AwsAccount:
    """The AWS side of a local cluster: moto as a server and what the autoscaler needs to find in it."""

    moto: ThreadedMotoServer
    endpoint: str
    config: ClusterConfig
    session: boto3.Session
    network: Network
    catalog: Catalog
    tokens: ClientTokens
    reservations: CapacityReservationStub


@contextmanager
def aws_account(config: ClusterConfig | None = None, *, catalog: Catalog | None = None,
                moto_server: ThreadedMotoServer | None = None) -> Iterator[AwsAccount]:
    """Start (or reuse ``moto_server``, reset) moto with the account a cluster needs (network, node role, AMI
    parameters, prices, the claims table); boto3 reaches it through ``AWS_ENDPOINT_URL``, undone after."""
    config = config or demo_config()
    catalog = catalog or moto_catalog(config.region)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto server's per-request access log
    own = moto_server is None
    server = moto_server or SerialMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    if own:
        server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION")}
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": config.region})
    os.environ.pop("AWS_SESSION_TOKEN", None)
    try:
        # Generous: resetting a moto that held thousands of instances takes seconds on a busy machine.
        with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"),
                                    timeout=120):
            pass
        one_loader_per_process()
        session = boto3.Session(region_name=config.region)
        install_price_data(session, region=config.region)
        tokens = ClientTokens().install(session.events)
        install_launch_template_groups(session.events, _lazy_ec2(session))
        reservations = CapacityReservationStub()
        reservations.install(session.events, _lazy_ec2(session))
        network = make_account(session, config, region=config.region,
                               k8s_version=config.kubernetes_version or "1.31")
        create_table(session.client("dynamodb", region_name=config.region), CLAIMS_TABLE)
        yield AwsAccount(moto=server, endpoint=endpoint, config=config, session=session, network=network,
                         catalog=catalog, tokens=tokens, reservations=reservations)
    finally:
        if own:
            server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class LocalCluster:
    """A running local account + cluster. Build with :meth:`start` (a context manager)."""

    moto: ThreadedMotoServer
    kube: KubeApiServer
    endpoint: str
    config: ClusterConfig
    session: boto3.Session
    network: Network
    catalog: Catalog | None = None
    tokens: ClientTokens = field(default_factory=ClientTokens)  # EC2's CreateFleet idempotency (moto lacks it)
    reservations: CapacityReservationStub = field(default_factory=CapacityReservationStub)  # moto lacks them too
    _counter: dict[str, int] = field(default_factory=dict)
    _runtime: Runtime | None = None
    # The warm cluster cache of each function's (simulated) container, by function name (see invoke).
    _caches: dict[str, ClusterCache | None] = field(default_factory=dict)
    # The clock a handler's Lambda context measures its remaining time on (a simulation sets its virtual one).
    context_clock: Callable[[], float] = time.monotonic

    @classmethod
    @contextmanager
    def start(cls, config: ClusterConfig | None = None, *, catalog: Catalog | None = None,
              moto_server: ThreadedMotoServer | None = None) -> Iterator[LocalCluster]:
        """Start (or reuse ``moto_server``, reset) moto and a fresh emulator; undo the environment after."""
        with aws_account(config, catalog=catalog, moto_server=moto_server) as account:
            kube = KubeApiServer().start()
            try:
                yield cls(moto=account.moto, kube=kube, endpoint=account.endpoint, config=account.config,
                          session=account.session, network=account.network, catalog=account.catalog,
                          tokens=account.tokens, reservations=account.reservations)
            finally:
                set_runtime(None)
                kube.stop()

    # ----- the autoscaler ----------------------------------------------------------------------
    def runtime(self, *, clock: Clock | None = None, sink: MetricsSink | None = None,
                config: ClusterConfig | None = None, environ: Mapping[str, str] | None = None,
                in_process: bool = False) -> Runtime:
        """A runtime wired to this cluster, installed for the handlers (``set_runtime``); ``environ`` adds
        deployment variables (the simulator names a provisioner function for replacement requests);
        ``in_process``: its Kubernetes client reaches the emulator without HTTP (``kube_inprocess``)."""
        rt = build_runtime(config=config or self.config,
                           environ={ENV_KUBE_ENDPOINT: self.kube.url, ENV_CLAIMS_TABLE: CLAIMS_TABLE,
                                    **(environ or {})},
                           session=self.session, clock=clock or SystemClock(), sink=sink or RecordingSink())
        if self.catalog is not None:
            rt.cloud.catalog.load(*self.catalog)
        if in_process:
            # The adapter keeps its ApiClient to itself; only its transport is swapped, every request the
            # handlers make is still built and parsed by the official client and the adapter.
            install_in_process(rt.cluster._api, self.kube)
        set_runtime(rt)
        self._runtime = rt
        return rt

    def invoke(self, handler: Callable[[Any, Any], Any], event: Mapping[str, Any], *,
               remaining_ms: int = 60_000, function_name: str = "function") -> Any:
        """Call any of the real handlers (``autoscaler.handlers.<name>.handler``) with this cluster's
        runtime installed and a Lambda context stub."""
        rt = self._runtime or self.runtime()
        # Each function runs in its own Lambda containers: the provisioner's warm pod/node cache
        # (adapters/kube/informer.py) lives in its container, and never serves another function's reads.
        rt.use_cluster_cache(self._caches.get(function_name))
        try:
            return handler(dict(event), LambdaContext(remaining_ms=remaining_ms, function_name=function_name,
                                                      monotonic=self.context_clock))
        finally:
            self._caches[function_name] = rt.warm.cluster_cache
            rt.use_cluster_cache(None)

    def cache_of(self, function_name: str) -> ClusterCache | None:
        """The warm cluster cache the function's (simulated) container holds, if it built one."""
        return self._caches.get(function_name)

    def invoke_provisioner(self, event: Mapping[str, Any] | None = None, *, remaining_ms: int = 60_000,
                           watch: bool = False) -> dict[str, Any]:
        """Call the real provisioner handler (scheduled-only unless ``watch``) and return its answer."""
        from autoscaler.handlers.provisioner import handler  # noqa: PLC0415 - Powertools set-up on first use

        payload = {"source": "schedule", "kind": "provisioner", "watch": watch, **(event or {})}
        result: dict[str, Any] = self.invoke(handler, payload, remaining_ms=remaining_ms,
                                             function_name="provisioner")
        return result

    # ----- the cluster -------------------------------------------------------------------------
    def scale(self, app: str, replicas: int, *, cpu: str = "1", namespace: str = "default") -> list[str]:
        """Set a Deployment's pod count (the emulator has no controllers); returns the pod names."""
        store = self.kube.store
        pods = sorted((p for p in store.objects("pods") if (p["metadata"].get("labels") or {}).get("app") == app
                       and p["metadata"].get("namespace") == namespace), key=lambda p: p["metadata"]["name"])
        while len(pods) > replicas:
            gone = pods.pop()
            store.delete("pods", namespace, gone["metadata"]["name"])
        while len(pods) < replicas:
            n = self._counter.get(app, 0)
            self._counter[app] = n + 1
            pods.append(store.create("pods", inflate_pod(f"{app}-{n:05d}", app=app, cpu=cpu, namespace=namespace)))
        return [p["metadata"]["name"] for p in pods]

    def pending_pods(self) -> list[str]:
        return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in self.kube.store.objects("pods")
                      if not (p.get("spec") or {}).get("nodeName"))

    def runtime_claims(self) -> list[ClaimView]:
        """The node claims stored for this cluster (its DynamoDB table in moto), as the product recorded them."""
        rt = self._runtime or self.runtime()
        return sorted(rt.claims.claims(), key=lambda c: c.claim_id)

    def instances(self) -> list[Ec2Instance]:
        """The cluster's pending/running instances the autoscaler launched (its cluster tag and a NodePool
        tag), read from EC2 itself, not through the product's fleet adapter."""
        ec2: Any = self.session.client("ec2", region_name=self.config.region)
        filters = [{"Name": f"tag:kubernetes.io/cluster/{self.config.cluster_name}", "Values": ["owned"]},
                   {"Name": "tag-key", "Values": [NODEPOOL_TAG]},
                   {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
        found = [ec2_instance(raw) for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
                 for reservation in page["Reservations"] for raw in reservation["Instances"]]
        return sorted(found, key=lambda inst: inst.instance_id)

    def register_nodes(self, *, bind: bool = True, instances: Iterable[Ec2Instance] | None = None) -> list[str]:
        """Play kubelet for every launched instance without a Node: the EKS AMI's bootstrap reads the
        instance's user data (``simulator/eks_node.py``), so the Node carries the labels and taints the
        product wrote there (the registration taint ``karpenter.sh/unregistered:NoExecute``, the NodePool's
        taints and startupTaints) and capacity and allocatable from EC2's instance data and the kubelet
        settings in it, as a real kubelet does; it is Ready at once. With ``bind``, then play kube-scheduler
        (``schedule_pods``): pods bind only where they tolerate every taint, so nothing binds to a node
        still carrying the registration taint. ``instances`` (default: :meth:`instances`) lets a caller
        play kubelet for exactly the instances whose boot it decided is over. Returns the new nodes' names."""
        store = self.kube.store
        ec2: Any = self.session.client("ec2", region_name=self.config.region)
        known = {(n.get("spec") or {}).get("providerID", "").rsplit("/", 1)[-1] for n in store.objects("nodes")}
        made = []
        for inst in self.instances() if instances is None else instances:
            if inst.instance_id in known:
                continue
            user_data = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")
            manifest = node_from_user_data(inst, (user_data.get("UserData") or {}).get("Value"),
                                           region=self.config.region)
            store.create("nodes", manifest)
            made.append(manifest["metadata"]["name"])
        if bind:
            self.schedule_pods()
        return made

    def schedule_pods(self) -> list[str]:
        """A strict, minimal kube-scheduler for the harness: binds each pending pod to the first Ready,
        schedulable node whose NoSchedule/NoExecute taints it all tolerates and whose free CPU holds its
        request (node affinity and spread are not modelled: use simulator scenarios for those). Never
        binds through a taint kube-scheduler would respect. Returns ``ns/name`` of the pods bound."""
        store = self.kube.store
        nodes = [n for n in store.objects("nodes")
                 if not (n.get("spec") or {}).get("unschedulable")
                 and any(c.get("type") == "Ready" and c.get("status") == "True"
                         for c in (n.get("status") or {}).get("conditions") or ())]
        free = {n["metadata"]["name"]: eks_node.parse_quantity(n["status"]["allocatable"]["cpu"], millis=True)
                for n in nodes}
        for p in store.objects("pods"):
            if (p.get("spec") or {}).get("nodeName") in free:
                free[p["spec"]["nodeName"]] -= _cpu_request(p)
        bound = []
        for p in sorted(store.objects("pods"), key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
            if (p.get("spec") or {}).get("nodeName"):
                continue
            want = _cpu_request(p)
            for n in nodes:
                name = n["metadata"]["name"]
                if free[name] >= want and _tolerates(p, (n.get("spec") or {}).get("taints") or ()):
                    store.bind(p["metadata"]["namespace"], p["metadata"]["name"], name)
                    free[name] -= want
                    bound.append(f"{p['metadata']['namespace']}/{p['metadata']['name']}")
                    break
        return bound


class InstanceFacts(Protocol):
    """What a kubelet knows of its instance (``simulator.ec2_instance.Ec2Instance`` has it)."""

    @property
    def instance_id(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def zone(self) -> str: ...
    @property
    def capacity_type(self) -> str: ...
    @property
    def private_dns_name(self) -> str: ...
    @property
    def provider_id(self) -> str: ...


class ClaimView(Protocol):
    """The fields of the product's node claims the harness reads (its claims table, through its runtime)."""

    @property
    def claim_id(self) -> str: ...
    @property
    def instance_id(self) -> str | None: ...
    @property
    def pods(self) -> tuple[str, ...]: ...


def _node_name(inst: InstanceFacts) -> str:
    return inst.private_dns_name or f"ip-{inst.instance_id}.ec2.internal"


def node_from_user_data(inst: InstanceFacts, user_data: str | bytes | None, *, region: str,
                        ready: bool = True) -> dict[str, Any]:
    """The Node a kubelet registers for ``inst`` booted with ``user_data``: labels, taints and kubelet
    settings as the EKS AMI's bootstrap reads them there, capacity, allocatable and the well-known labels
    from ``simulator/eks_node.py``. Not ``ready``: Ready=False and ``node.kubernetes.io/not-ready``."""
    node = eks_node.node_from_user_data(user_data, eks_node.instance_info(inst.instance_type),
                                        name=_node_name(inst), zone=inst.zone, region=region,
                                        capacity_type=inst.capacity_type)
    taints = [dict(t) for t in node.taints]
    if not ready:
        taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
    return {
        "metadata": {"name": node.name, "labels": dict(node.labels)},
        "spec": {"providerID": inst.provider_id, "taints": taints},
        "status": {**node.status(), "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def node_manifest(inst: InstanceFacts, *, region: str, ready: bool = True) -> dict[str, Any]:
    """The Node a kubelet registers for ``inst`` with no user data of the product's: the well-known labels,
    capacity and allocatable of ``simulator/eks_node.py`` (written from the EKS AMI's and the kubelet's
    definitions, not the product's), no taints. The callers (managed node groups, Karpenter's own nodes,
    the Cluster-Autoscaler baseline) add their group's labels and taints. Not ``ready``: Ready=False and
    the ``node.kubernetes.io/not-ready:NoSchedule`` taint."""
    name = _node_name(inst)
    info = eks_node.instance_info(inst.instance_type)
    labels = eks_node.labels_for(info, zone=inst.zone, region=region, capacity_type=inst.capacity_type,
                                 hostname=name)
    taints: list[dict[str, str]] = [] if ready else [{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": inst.provider_id, "taints": taints},
        "status": {"capacity": eks_node.quantities(eks_node.capacity(info)),
                   "allocatable": eks_node.quantities(eks_node.allocatable(info)),
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _cpu_request(pod: Mapping[str, Any]) -> int:
    return sum(eks_node.parse_quantity(((c.get("resources") or {}).get("requests") or {}).get("cpu", "0"), millis=True)
               for c in pod["spec"].get("containers") or ())


def _tolerates(pod: Mapping[str, Any], taints: Any) -> bool:
    """kube-scheduler's TaintToleration filter: every NoSchedule/NoExecute taint needs a toleration."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or ()
    for taint in taints:
        if taint.get("effect") == "PreferNoSchedule":
            continue
        if not any(_matches(t, taint) for t in tolerations):
            return False
    return True


def _matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    return toleration.get("operator") == "Exists" or toleration.get("value", "") == taint.get("value", "")
