"""EKS authentication: token format and signature inputs (botocore), refresh, DescribeCluster."""

from __future__ import annotations

import base64
import datetime as dt
import ssl
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.stub import Stubber
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from moto import mock_aws

from autoscaler.adapters.clock import ManualClock
from autoscaler.adapters.kube import auth
from autoscaler.adapters.kube.cluster import KubeCluster
from simulator.kube_api import KubeApiServer

FIXED = dt.datetime(2024, 5, 1, 12, 0, 0)


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
                 "AWS_DEFAULT_REGION": "eu-west-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: FIXED)
    # boto3's default session caches the credentials it resolved first: a session made by an earlier test in
    # this process (with moto's "testing" keys) would sign with those instead of the keys set above
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    auth._ENDPOINTS.clear()


@pytest.fixture
def moto_aws(creds: None) -> Iterator[None]:
    with mock_aws():
        yield


def _decode(token: str) -> tuple[str, dict[str, list[str]]]:
    assert token.startswith("k8s-aws-v1.")
    body = token[len("k8s-aws-v1."):]
    assert "=" not in body and "+" not in body and "/" not in body  # unpadded base64url
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}", parse_qs(parts.query)


def _expected_signature(cluster_header: str) -> str:
    """SigV4 query signature of GetCallerIdentity computed independently with botocore's signer."""
    request = AWSRequest(method="GET", url="https://sts.eu-west-1.amazonaws.com/",
                         params={"Action": "GetCallerIdentity", "Version": "2011-06-15"},
                         headers={"x-k8s-aws-id": cluster_header})
    botocore.auth.SigV4QueryAuth(Credentials("AKIDEXAMPLE", "secret"), "sts", "eu-west-1",
                                 expires=60).add_auth(request)
    return parse_qs(urlsplit(request.url).query)["X-Amz-Signature"][0]


def test_token_is_a_presigned_get_caller_identity_url(creds: None) -> None:
    sts = boto3.client("sts", region_name="eu-west-1")
    base, query = _decode(auth.eks_token(sts, "prod"))
    assert base == "https://sts.eu-west-1.amazonaws.com/"
    assert query["Action"] == ["GetCallerIdentity"] and query["Version"] == ["2011-06-15"]
    assert query["X-Amz-Expires"] == ["60"]
    assert query["X-Amz-Date"] == ["20240501T120000Z"]
    assert query["X-Amz-SignedHeaders"] == ["host;x-k8s-aws-id"]
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-Credential"] == ["AKIDEXAMPLE/20240501/eu-west-1/sts/aws4_request"]
    assert "ClusterName" not in query


@pytest.mark.parametrize(("cluster", "signed_as", "same"), [("prod", "prod", True), ("prod", "staging", False)])
def test_the_signature_covers_the_cluster_header(creds: None, cluster: str, signed_as: str, same: bool) -> None:
    _, query = _decode(auth.eks_token(boto3.client("sts", region_name="eu-west-1"), cluster))
    assert (query["X-Amz-Signature"][0] == _expected_signature(signed_as)) is same


def test_token_is_cached_then_refreshed_after_14_minutes(creds: None) -> None:
    clock = ManualClock()
    source = auth.EksTokenSource("prod", sts=boto3.client("sts", region_name="eu-west-1"), clock=clock)
    first = source.token()
    clock.advance(13 * 60 + 59)
    assert source.token() == first and source.minted == 1
    clock.advance(1)
    source.token()
    assert source.minted == 2
    assert source.expires_at == clock.now() + 14 * 60


def _pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(FIXED).not_valid_after(FIXED + dt.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def _stubbed_eks(pem: bytes, *, times: int = 1) -> tuple[Any, Stubber]:
    eks = boto3.client("eks", region_name="eu-west-1")
    stub = Stubber(eks)
    for _ in range(times):
        stub.add_response("describe_cluster", {"cluster": {
            "name": "prod", "status": "ACTIVE", "endpoint": "https://ABC.gr7.eu-west-1.eks.amazonaws.com",
            "certificateAuthority": {"data": base64.b64encode(pem).decode()}}}, {"name": "prod"})
    stub.activate()
    return eks, stub


def test_endpoint_and_ca_are_described_once_and_cached(creds: None) -> None:
    pem = _pem()
    eks, stub = _stubbed_eks(pem, times=1)
    info = auth.describe_endpoint(eks, "prod")
    assert auth.describe_endpoint(eks, "prod") is info  # a second DescribeCluster would fail the stub
    stub.assert_no_pending_responses()
    assert (info.endpoint, info.ca_pem) == ("https://ABC.gr7.eu-west-1.eks.amazonaws.com", pem)


def test_api_client_for_eks_verifies_tls_with_the_cluster_ca_and_refreshes_the_token(
        creds: None, monkeypatch: pytest.MonkeyPatch) -> None:
    pem = _pem()
    eks, _ = _stubbed_eks(pem)
    clock = ManualClock()
    client = auth.api_client_for_eks("prod", eks=eks, sts=boto3.client("sts", region_name="eu-west-1"),
                                     clock=clock)
    cfg = client.configuration
    assert cfg.host == "https://ABC.gr7.eu-west-1.eks.amazonaws.com"
    assert cfg.verify_ssl is True and cfg.ca_cert_data == pem.decode()
    pool_kw = client.rest_client.pool_manager.connection_pool_kw
    assert pool_kw["cert_reqs"] == ssl.CERT_REQUIRED and pool_kw["ca_cert_data"] == pem.decode()
    first = cfg.auth_settings()["BearerToken"]["value"]
    assert first.startswith("Bearer k8s-aws-v1.")
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: FIXED + dt.timedelta(minutes=14))
    clock.advance(14 * 60 - 1)
    assert cfg.auth_settings()["BearerToken"]["value"] == first
    clock.advance(1)
    _, query = _decode(cfg.auth_settings()["BearerToken"]["value"].removeprefix("Bearer "))
    assert query["X-Amz-Date"] == ["20240501T121400Z"]


def test_describe_cluster_with_moto(moto_aws: None) -> None:
    iam = boto3.client("iam", region_name="eu-west-1")
    role = iam.create_role(RoleName="eks", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks = boto3.client("eks", region_name="eu-west-1")
    eks.create_cluster(name="prod", roleArn=role, resourcesVpcConfig={"subnetIds": []})
    # moto's CA data is random bytes, not a certificate: refused with a message naming the field.
    with pytest.raises(ValueError, match=r"'prod': certificateAuthority.data is not a PEM certificate"):
        auth.describe_endpoint(eks, "prod")
    with pytest.raises(eks.exceptions.ResourceNotFoundException):
        auth.describe_endpoint(eks, "nope")


def test_explicit_endpoint_and_token_reach_the_server(kube_api: KubeApiServer) -> None:
    client = auth.api_client_for_endpoint(kube_api.url, token="local-token", verify_tls=False)
    kube_api.store.create("nodes", {"metadata": {"name": "n1"}})
    assert [n.name for n in KubeCluster(client).nodes()] == ["n1"]
    assert client.configuration.auth_settings()["BearerToken"]["value"] == "Bearer local-token"
