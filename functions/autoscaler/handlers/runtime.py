"""What every handler needs, built once per Lambda container and reused by warm invocations: the
cluster configuration, the AWS and Kubernetes adapters, the clock and the metrics sink, and the one typed
owner of what a warm container keeps between invocations (``WarmState``).

Where the Kubernetes API is reached:
- ``AUTOSCALER_KUBE_ENDPOINT`` (with optional ``AUTOSCALER_KUBE_TOKEN`` and base64
  ``AUTOSCALER_KUBE_CA``): an explicit endpoint, for the local simulation, tests and tunnels;
- otherwise the EKS cluster named in the configuration, with a bearer token from STS and the
  endpoint and CA from eks:DescribeCluster.

AWS clients honour ``AWS_ENDPOINT_URL`` (botocore does), which is how tests point them at moto.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autoscaler.adapters.aws._calls import client_config, use_fast_timestamps
from autoscaler.adapters.aws.claims import DynamoClaimStore
from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.aws.replacement import LambdaReplacementRequester
from autoscaler.adapters.aws.session import aws_session, describe_eks_cluster
from autoscaler.adapters.aws.sqs import SqsMessageVisibility
from autoscaler.adapters.aws.userdata import ClusterInfo
from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.auth import ENV_KUBE_CA, ENV_KUBE_ENDPOINT, ENV_KUBE_TOKEN, api_client_from_environ
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.adapters.kube.informer import ClusterCache
from autoscaler.app.claims import MemoryClaimStore
from autoscaler.app.interruption_batch import DrainPools
from autoscaler.app.ports import ClaimStore, Clock
from autoscaler.config import ClusterConfig, DeploymentEnv, load_deployment_env, load_runtime_config
from autoscaler.domain.nodeclass import NodeClass, parse_node_classes
from autoscaler.domain.nodepool import NodePool, parse_node_pools
from autoscaler.handlers.observability import PowertoolsSink
from autoscaler.metrics_catalog import MetricsSink

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch import BatchProcessor

    from autoscaler.app.adoption import KarpenterNodes
    from autoscaler.app.provisioner import Provisioner

__all__ = ["ENV_KUBE_CA", "ENV_KUBE_ENDPOINT", "ENV_KUBE_TOKEN"]  # defined in adapters/kube/auth.py
DEFAULT_K8S_VERSION = "1.31"


@dataclass
class InterruptionWarm:
    """The interruption function's per-container pieces: Powertools' batch processor (it keeps a batch's
    records and failures between its calls) and the drain pools."""

    processor: BatchProcessor
    pools: DrainPools


@dataclass
class WarmState:
    """Everything a warm container keeps between invocations, one typed field per piece, built on first
    use by the handler that needs it."""

    # The provisioner's and the disruption function's watch-fed pods and nodes (adapters/kube/informer.py).
    cluster_cache: ClusterCache | None = None
    # The provisioner service per dry-run flag (its pod-Event de-duplication and planning inputs stay warm).
    provisioners: dict[bool, Provisioner] = field(default_factory=dict)
    # Karpenter nodes left alone: logged when their set changes, not on every disruption pass.
    karpenter_nodes: KarpenterNodes | None = None
    interruption: InterruptionWarm | None = None


@dataclass
class Runtime:
    config: ClusterConfig
    env: DeploymentEnv
    node_pools: list[NodePool]
    node_classes: dict[str, NodeClass]
    cloud: AwsCloud
    cluster: KubeCluster
    clock: Clock
    sink: MetricsSink
    session: Any  # boto3.Session, for the few clients a handler needs itself (lambda, sqs)
    claims: ClaimStore = field(default_factory=MemoryClaimStore)  # node claims: DynamoDB when deployed
    warm: WarmState = field(default_factory=WarmState)
    _clients: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        """A boto3 client for ``service`` in the cluster's region, created once."""
        if service not in self._clients:
            self._clients[service] = self.session.client(service, region_name=self.config.region)
        return self._clients[service]

    def cluster_cache(self) -> ClusterCache:
        """The container's watch-fed pods and nodes: created on first use, then kept for the container's
        life. The cluster adapter serves its unfiltered pod and node reads from it."""
        if self.warm.cluster_cache is None:
            self.use_cluster_cache(ClusterCache(self.cluster, clock=self.clock))
        assert self.warm.cluster_cache is not None
        return self.warm.cluster_cache

    def use_cluster_cache(self, cache: ClusterCache | None) -> None:
        """Install (None: drop) the warm cache: the one place the cluster adapter is told which cache serves
        it (the simulation gives each simulated container its own)."""
        self.warm.cluster_cache = cache
        self.cluster.cache = cache

    def replacement_requester(self) -> LambdaReplacementRequester | None:
        """The provisioner function's replacement requests (asynchronous invoke), or None when the
        deployment names no provisioner function (local runs): the caller then acts without one."""
        function = self.env.provisioner_function
        return LambdaReplacementRequester(self.client("lambda"), function_name=function) if function else None

    def message_visibility(self) -> SqsMessageVisibility:
        """SQS visibility of the interruption queue's messages."""
        return SqsMessageVisibility(lambda: self.client("sqs"))


def _cluster_info(config: ClusterConfig, session: Any, env: Mapping[str, str]) -> ClusterInfo:
    endpoint = env.get(ENV_KUBE_ENDPOINT)
    if endpoint:
        return ClusterInfo(name=config.cluster_name, endpoint=endpoint,
                           certificate_authority=env.get(ENV_KUBE_CA, ""),
                           k8s_version=config.kubernetes_version or DEFAULT_K8S_VERSION)
    described = describe_eks_cluster(session, name=config.cluster_name, region=config.region)
    network = described.get("kubernetesNetworkConfig") or {}
    return ClusterInfo(name=config.cluster_name, endpoint=described["endpoint"],
                       certificate_authority=(described.get("certificateAuthority") or {}).get("data", ""),
                       k8s_version=config.kubernetes_version or described.get("version") or DEFAULT_K8S_VERSION,
                       service_cidr=network.get("serviceIpv4Cidr") or "10.100.0.0/16")


def build_runtime(*, config: ClusterConfig | None = None, environ: Mapping[str, str] | None = None,
                  session: Any = None, clock: Clock | None = None, sink: MetricsSink | None = None) -> Runtime:
    """Build every adapter. Arguments override what the environment would give (tests, simulation)."""
    env = os.environ if environ is None else environ
    config = config or load_runtime_config(environ=env)
    session = session or aws_session(config.region)
    use_fast_timestamps(session)  # before any client is made from it
    clock = clock or SystemClock()
    node_pools = parse_node_pools(config.node_pools)
    node_classes = parse_node_classes(config.node_classes, default_role=config.node_role_name)
    info = _cluster_info(config, session, env)
    api = api_client_from_environ(env, cluster_name=config.cluster_name, session=session, region=config.region,
                                  clock=clock)
    deployment = load_deployment_env(env)
    # Without a table (local runs, `autoscaler` on a laptop) claims live in this process only.
    claims: ClaimStore = (DynamoClaimStore(session.client("dynamodb", region_name=config.region,
                                                          config=client_config()),
                                           table=deployment.claims_table, cluster_name=config.cluster_name)
                          if deployment.claims_table else MemoryClaimStore())
    return Runtime(
        config=config, env=deployment, node_pools=node_pools, node_classes=node_classes,
        cloud=AwsCloud.from_session(session, region=config.region, cluster=info, clock=clock,
                                    adopt_karpenter=config.migration.adopt_karpenter_nodes,
                                    instance_profile=deployment.instance_profile
                                    or config.node_role.instance_profile_name),
        cluster=KubeCluster(api, clock=clock), clock=clock, sink=sink or PowertoolsSink(), session=session,
        claims=claims,
    )


_RUNTIME: Runtime | None = None
_LOCK = threading.Lock()


def get_runtime() -> Runtime:
    """The container's runtime, built on first use (a cold start) and reused while warm."""
    global _RUNTIME  # noqa: PLW0603 - one runtime per Lambda container is the point
    with _LOCK:
        if _RUNTIME is None:
            _RUNTIME = build_runtime()
        return _RUNTIME


def set_runtime(runtime: Runtime | None) -> None:
    """Install (or clear, with None) the runtime handlers use: tests and the local simulation."""
    global _RUNTIME  # noqa: PLW0603
    with _LOCK:
        _RUNTIME = runtime


