"""The ``ClaimStore`` contract, run against the in-process store (``app/claims.MemoryClaimStore``, what a
local run without a table uses) and ``DynamoClaimStore`` on moto: the in-process store may never be more
forgiving than the table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.claims import DynamoClaimStore, create_table
from autoscaler.app.claims import MemoryClaimStore
from autoscaler.app.ports import ClaimStore, CloudError
from autoscaler.domain.claims import Claim
from tests.moto_env import moto_environment

REGION = "us-east-1"


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClaimStore]:
    if request.param == "memory":
        yield MemoryClaimStore()
        return
    with moto_environment(monkeypatch, REGION):
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, "claims")
        yield DynamoClaimStore(client, table="claims", cluster_name="demo")


def claim(cid: str, **kw: Any) -> Claim:
    base: dict[str, Any] = {"claim_id": cid, "group": cid, "group_size": 1, "node_pool": "default",
                            "node_class": "default", "capacity_types": ("spot",), "instance_types": ("m5.large",),
                            "zones": (), "pods": ("ns/p",), "created_at": 1_800_000_000.0}
    return Claim(**{**base, **kw})


def test_claims_are_created_once_read_back_updated_and_deleted(store: ClaimStore) -> None:
    store.create([claim("a"), claim("b")])
    assert sorted(c.claim_id for c in store.claims()) == ["a", "b"]
    # a claim id is never reused: the create is conditional, and the whole chunk is refused
    with pytest.raises(CloudError):
        store.create([claim("c"), claim("a")])
    assert sorted(c.claim_id for c in store.claims()) == ["a", "b"]
    done = claim("a").launched(instance_id="i-1", instance_type="m5.large", zone="us-east-1a", capacity_type="spot")
    store.update([done])
    store.delete({"b", "never-existed"})
    assert store.claims() == [done]


def test_the_launch_lease_has_one_holder_until_released_or_expired(store: ClaimStore) -> None:
    assert store.acquire_lease("pass-1", now=100.0, seconds=90)
    assert not store.acquire_lease("pass-2", now=150.0, seconds=90)
    assert store.acquire_lease("pass-1", now=150.0, seconds=90)  # the holder renews
    store.release_lease("pass-2")  # not the holder: nothing happens
    assert not store.acquire_lease("pass-2", now=200.0, seconds=90)
    assert store.acquire_lease("pass-2", now=241.0, seconds=90)  # pass-1's lease expired (it died)
    store.release_lease("pass-2")
    assert store.acquire_lease("pass-3", now=242.0, seconds=90)
    assert store.claims() == []  # the lease is not a claim
