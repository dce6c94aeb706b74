"""Fixtures for the AWS adapter tests: one in-process moto region per test, with EC2's CreateFleet
client-token idempotency (the strict stand-in ``simulator.ec2_tokens``, which moto lacks) on every boto3
client a test makes: a replayed CreateFleet gets the first answer and launches nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.clock import ManualClock
from simulator.ec2_tokens import ClientTokens
from simulator.local import Catalog
from simulator.local import moto_catalog as local_moto_catalog
from tests.adapters.aws.helpers import CLUSTER, REGION, Network, make_network, seed_eks_amis
from tests.moto_env import moto_environment


@pytest.fixture(scope="session")
def moto_catalog() -> Catalog:
    """moto's full instance catalog (DescribeInstanceTypes / DescribeInstanceTypeOfferings answers), read
    from the package data moto answers from: tests that are not about the catalog prime
    InstanceCatalog.load() with it instead of fetching ~1,400 types (seconds of CPU per process).
    test_catalog_network.py holds it equal to what the catalog reads from moto."""
    return local_moto_catalog(REGION)


@pytest.fixture
def client_tokens(monkeypatch: pytest.MonkeyPatch) -> ClientTokens:
    """The token stand-in on a fresh default boto3 session, so every ``boto3.client`` of the test (the
    fixtures' and a test's own) goes through it; the previous default session comes back afterwards."""
    session = boto3.Session()
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", session)
    return ClientTokens().install(session.events)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, client_tokens: ClientTokens) -> Iterator[None]:
    with moto_environment(monkeypatch, REGION):
        yield


@pytest.fixture
def ec2(aws: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


@pytest.fixture
def ssm(aws: None) -> Any:
    return boto3.client("ssm", region_name=REGION)


@pytest.fixture
def iam(aws: None) -> Any:
    return boto3.client("iam", region_name=REGION)


@pytest.fixture
def network(ec2: Any) -> Network:
    return make_network(ec2)


@pytest.fixture
def cloud(ec2: Any, ssm: Any, iam: Any, network: Network, moto_catalog: Any) -> AwsCloud:
    """The AWS adapter on moto with the EKS images published and the catalog primed (a test module may
    define its own ``cloud``)."""
    seed_eks_amis(ec2)
    built = AwsCloud(ec2=ec2, ssm=ssm, iam=iam, pricing=boto3.client("pricing", region_name=REGION),
                     region=REGION, cluster=CLUSTER, clock=ManualClock(), catalog_ttl=3600)
    built.catalog.load(*moto_catalog)
    return built
