"""Authenticating to the EKS API server from Lambda, without a kubeconfig.

The bearer token is what ``aws eks get-token`` prints: ``k8s-aws-v1.`` followed by the unpadded
base64url of a presigned STS ``GetCallerIdentity`` URL whose signature covers the
``x-k8s-aws-id: <cluster>`` header. EKS accepts it for 15 minutes; ``EksTokenSource`` mints a new
one after 14 (by the injected clock), so a warm Lambda container never sends a stale token. The
endpoint and CA bundle come from ``eks:DescribeCluster`` once per container, and TLS is verified
against that CA. For tests and local use, ``api_client_for_endpoint`` takes an explicit endpoint and
optional token instead.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubernetes.client import ApiClient, Configuration

from autoscaler.app.ports import Clock, ClusterError

if TYPE_CHECKING:
    from mypy_boto3_eks import EKSClient
    from mypy_boto3_sts import STSClient

# An explicit endpoint (the local simulation, tests, tunnels) instead of the EKS cluster's own.
ENV_KUBE_ENDPOINT = "AUTOSCALER_KUBE_ENDPOINT"
ENV_KUBE_TOKEN = "AUTOSCALER_KUBE_TOKEN"
ENV_KUBE_CA = "AUTOSCALER_KUBE_CA"
TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
PRESIGN_SECONDS = 60  # what aws-iam-authenticator signs with; EKS itself honours the token 15 min
REFRESH_AFTER_SECONDS = 14 * 60


def _stash_cluster(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    # GetCallerIdentity takes no parameters: carry the cluster name to the signer in the context.
    if "ClusterName" in params:
        context["eks_cluster_name"] = params.pop("ClusterName")


def _add_cluster_header(request: Any, **_: Any) -> None:
    name = request.context.get("eks_cluster_name")
    if name:
        request.headers[CLUSTER_ID_HEADER] = name


def presigned_identity_url(sts: STSClient, cluster_name: str) -> str:
    """A GetCallerIdentity URL presigned for ``PRESIGN_SECONDS`` with ``x-k8s-aws-id`` signed in."""
    events = sts.meta.events
    events.register("provide-client-params.sts.GetCallerIdentity", _stash_cluster,
                    unique_id="autoscaler-eks-cluster-param")
    events.register("before-sign.sts.GetCallerIdentity", _add_cluster_header,
                    unique_id="autoscaler-eks-cluster-header")
    return sts.generate_presigned_url(
        "get_caller_identity", Params={"ClusterName": cluster_name},
        ExpiresIn=PRESIGN_SECONDS, HttpMethod="GET",
    )


def eks_token(sts: STSClient, cluster_name: str) -> str:
    url = presigned_identity_url(sts, cluster_name)
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class EksTokenSource:
    """A cached bearer token for one cluster, minted again once ``REFRESH_AFTER_SECONDS`` passed."""

    def __init__(self, cluster_name: str, *, sts: STSClient, clock: Clock,
                 refresh_after: float = REFRESH_AFTER_SECONDS) -> None:
        self.cluster_name = cluster_name
        self._sts, self._clock, self._refresh_after = sts, clock, refresh_after
        self._token: str | None = None
        self._issued_at = 0.0
        self._lock = threading.Lock()
        self.minted = 0  # how many tokens were made: for logs and tests

    def token(self) -> str:
        with self._lock:
            now = self._clock.now()
            if self._token is None or now - self._issued_at >= self._refresh_after:
                self._token = eks_token(self._sts, self.cluster_name)
                self._issued_at = now
                self.minted += 1
            return self._token

    @property
    def expires_at(self) -> float:
        """When this source will mint the next token (epoch seconds, by its clock)."""
        return self._issued_at + self._refresh_after


@dataclass(frozen=True, slots=True)
class ClusterEndpoint:
    name: str
    endpoint: str  # https://XXXX.gr7.us-east-1.eks.amazonaws.com
    ca_pem: bytes  # the cluster CA bundle, PEM


_ENDPOINTS: dict[str, ClusterEndpoint] = {}
_ENDPOINTS_LOCK = threading.Lock()


def describe_endpoint(eks: EKSClient, cluster_name: str, *, cache: bool = True) -> ClusterEndpoint:
    """Endpoint and CA of a cluster from eks:DescribeCluster, cached for the container's life
    (neither changes while a cluster exists)."""
    with _ENDPOINTS_LOCK:
        if cache and cluster_name in _ENDPOINTS:
            return _ENDPOINTS[cluster_name]
    cluster = eks.describe_cluster(name=cluster_name)["cluster"]
    endpoint = cluster.get("endpoint")
    ca_data = (cluster.get("certificateAuthority") or {}).get("data")
    if not endpoint or not ca_data:
        raise ValueError(f"EKS cluster {cluster_name!r}: DescribeCluster returned no endpoint or "
                         f"certificateAuthority.data (status {cluster.get('status')!r}); is it ACTIVE?")
    try:
        ca_pem = base64.b64decode(ca_data, validate=True)
    except ValueError as exc:
        raise ValueError(f"EKS cluster {cluster_name!r}: certificateAuthority.data is not base64") from exc
    if b"-----BEGIN CERTIFICATE-----" not in ca_pem:
        raise ValueError(f"EKS cluster {cluster_name!r}: certificateAuthority.data is not a PEM certificate")
    info = ClusterEndpoint(cluster_name, endpoint, ca_pem)
    with _ENDPOINTS_LOCK:
        _ENDPOINTS[cluster_name] = info
    return info


def api_client_for_eks(cluster_name: str, *, eks: EKSClient, sts: STSClient, clock: Clock) -> ApiClient:
    """An ``ApiClient`` for an EKS cluster: endpoint and CA from DescribeCluster, TLS verified
    against that CA, and a bearer token refreshed before every request that needs a new one."""
    info = describe_endpoint(eks, cluster_name)
    source = EksTokenSource(cluster_name, sts=sts, clock=clock)
    config = Configuration(host=info.endpoint)
    config.verify_ssl = True
    config.ca_cert_data = info.ca_pem.decode()
    config.api_key_prefix = {"authorization": "Bearer"}
    config.api_key = {"authorization": source.token()}

    def refresh(cfg: Configuration) -> None:
        cfg.api_key["authorization"] = source.token()

    # The client declares the hook's type as None, though it calls it before each request.
    config.refresh_api_key_hook = refresh  # type: ignore[assignment]
    return ApiClient(configuration=config)


def api_client_for_endpoint(endpoint: str, *, token: str | None = None, ca_pem: bytes | None = None,
                            verify_tls: bool = True) -> ApiClient:
    """An ``ApiClient`` for an explicit endpoint (the emulator, a kind cluster, a tunnel)."""
    config = Configuration(host=endpoint)
    config.verify_ssl = verify_tls
    if ca_pem:
        config.ca_cert_data = ca_pem.decode()
    if token:
        config.api_key_prefix = {"authorization": "Bearer"}
        config.api_key = {"authorization": token}
    return ApiClient(configuration=config)


def api_client_from_environ(environ: Mapping[str, str], *, cluster_name: str, session: Any, region: str,
                            clock: Clock) -> ApiClient:
    """``AUTOSCALER_KUBE_ENDPOINT`` (with optional ``AUTOSCALER_KUBE_TOKEN`` and base64
    ``AUTOSCALER_KUBE_CA``) when set, else the EKS cluster ``cluster_name`` (``session``: a boto3 Session)."""
    endpoint = environ.get(ENV_KUBE_ENDPOINT)
    if endpoint:
        ca = environ.get(ENV_KUBE_CA)
        return api_client_for_endpoint(endpoint, token=environ.get(ENV_KUBE_TOKEN),
                                       ca_pem=base64.b64decode(ca) if ca else None,
                                       verify_tls=endpoint.startswith("https://") and bool(ca))
    return api_client_for_eks(cluster_name, eks=session.client("eks", region_name=region),
                              sts=session.client("sts", region_name=region), clock=clock)


def api_client_from_kubeconfig(*, config_file: str | None = None, context: str | None = None) -> ApiClient:
    """An ``ApiClient`` from a kubeconfig (default ``$KUBECONFIG`` or ``~/.kube/config``) and context
    (default: the current one), as kubectl would connect: for the operator's CLI, never for Lambda."""
    from kubernetes import config as kube_config  # noqa: PLC0415 - only the CLI needs kubeconfig support

    try:
        client: ApiClient = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=config_file, context=context)
    except (kube_config.ConfigException, OSError, ValueError) as exc:
        raise ClusterError(f"kubeconfig{f' context {context!r}' if context else ''}: {exc}") from exc
    return client
