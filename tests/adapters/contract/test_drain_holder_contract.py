"""Issue 33 item 14, both orders of two invocations handling the same interruption, on the real
kube-apiserver and on the emulator (the interruption function's own identity and RBAC on the real one):

- the early reader (read the node before the other wrote) loses its conditional write with 409 Conflict,
  reads again and finds the other's holder;
- the late reader (read after the other wrote) finds the other's holder at once;

either way it stops: it cordons nothing more, evicts nothing, asks for no replacement. A holder's lease
ends with its invocation: an expired (or released) lease is taken over, so a dead holder leaves nothing
cordoned for ever. EC2 is in-process moto (the instance the node runs on)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.drain_lease import DrainLease
from autoscaler.app.interruption import InterruptionService, Outcome
from autoscaler.app.ports import ConflictError
from autoscaler.domain.interruption import InterruptionEvent, parse_event
from autoscaler.domain.keys import DRAIN_HOLDER_ANNOTATION
from tests.adapters.aws.helpers import CLUSTER, REGION, builtin_images
from tests.adapters.contract.conftest import Server
from tests.app.fakes import Replacements
from tests.events import load_event
from tests.kube_objects import pod
from tests.moto_env import moto_environment


@dataclass
class Invocation:
    name: str
    cluster: KubeCluster
    requests: Replacements
    service: InterruptionService
    lease: DrainLease
    conflicts: list[ConflictError] = field(default_factory=list)

    def handle(self, event: InterruptionEvent) -> Any:
        return self.service.handle(event, drain_until=time.monotonic() + 20, lease=self.lease)


@pytest.fixture
def ec2_instance(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[AwsCloud, str]]:
    with moto_environment(monkeypatch, REGION):
        ec2 = boto3.client("ec2", region_name=REGION)
        iid = ec2.run_instances(ImageId=builtin_images(ec2)["amd64"], MinCount=1, MaxCount=1,
                                InstanceType="m5.large")["Instances"][0]["InstanceId"]
        cloud = AwsCloud(ec2=ec2, ssm=boto3.client("ssm", region_name=REGION),
                         iam=boto3.client("iam", region_name=REGION),
                         pricing=boto3.client("pricing", region_name=REGION), region=REGION, cluster=CLUSTER)
        yield cloud, iid


def _invocation(server: Server, cloud: AwsCloud, name: str, *, until: float | None = None) -> Invocation:
    cluster = server.cluster("interruption")
    requests = Replacements()
    service = InterruptionService(cluster=cluster, cloud=cloud, replacements=requests, clock=SystemClock(),
                                  cluster_name=CLUSTER.name, poll_interval=0.2, retry_interval=0.5)
    lease = DrainLease(f"request-{name}/{name}", until if until is not None else time.time() + 600)
    invocation = Invocation(name, cluster, requests, service, lease)
    annotate = cluster.annotate_node

    def recording(*args: Any, **kwargs: Any) -> Any:
        try:
            return annotate(*args, **kwargs)
        except ConflictError as exc:
            invocation.conflicts.append(exc)
            raise

    cluster.annotate_node = recording  # type: ignore[method-assign]
    return invocation


def _world(server: Server, ns: str, node_name: str, iid: str) -> InterruptionEvent:
    server.create("/api/v1/nodes", {
        "metadata": {"name": node_name, "labels": {"kubernetes.io/hostname": node_name}},
        "spec": {"providerID": f"aws:///us-east-1a/{iid}"}})
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("app", namespace=ns, node=node_name))
    raw = load_event("spot-interruption-warning")
    raw["detail"]["instance-id"] = iid
    raw["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    event = parse_event(raw)
    assert isinstance(event, InterruptionEvent)
    return event


def _evictions_of(server: Server, ns: str) -> bool:
    """Whether the pod was evicted (on both servers an evicted bound pod is deleted or terminating)."""
    current = server.get(f"/api/v1/namespaces/{ns}/pods/app")
    return current is None or bool(current["metadata"].get("deletionTimestamp"))


def _holder(server: Server, node_name: str) -> str:
    node = server.get(f"/api/v1/nodes/{node_name}")
    assert node is not None
    return str((node["metadata"].get("annotations") or {}).get(DRAIN_HOLDER_ANNOTATION, ""))


def test_item14_the_late_reader_sees_another_holder_and_stops(
        server: Server, ns: str, node_name: str, ec2_instance: tuple[AwsCloud, str]) -> None:
    cloud, iid = ec2_instance
    event = _world(server, ns, node_name, iid)
    first, late = _invocation(server, cloud, "first"), _invocation(server, cloud, "late")
    # Given the first invocation took the node (cordoned, replacement requested), its drain not yet started
    begun = first.service.begin(event, lease=first.lease)
    assert [o.outcome for o in begun] == [Outcome.CORDONED]
    assert [r["nodes"] for r in first.requests.requests] == [[node_name]]
    # When the other reads the node after that write and handles the same interruption
    outcome = late.handle(event)
    # Then it sees the first as holder and stops: no eviction, no replacement request, no conflict needed
    assert [i.outcome for i in outcome.instances] == [Outcome.ALREADY_DRAINING]
    assert late.requests.requests == [] and late.conflicts == []
    assert not _evictions_of(server, ns)
    assert _holder(server, node_name) == first.lease.holder


def test_item14_the_early_reader_loses_on_409_and_stops(
        server: Server, ns: str, node_name: str, ec2_instance: tuple[AwsCloud, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    cloud, iid = ec2_instance
    event = _world(server, ns, node_name, iid)
    first, early = _invocation(server, cloud, "first"), _invocation(server, cloud, "early")
    # Given the early reader listed the nodes before the first invocation wrote its record
    stale = early.cluster.nodes()
    monkeypatch.setattr(early.cluster, "nodes", lambda: stale)
    assert [o.outcome for o in first.service.begin(event, lease=first.lease)] == [Outcome.CORDONED]
    # When it handles the interruption from what it read
    outcome = early.handle(event)
    # Then its conditional write was refused (409), it read again, saw the first as holder and stopped
    assert [i.outcome for i in outcome.instances] == [Outcome.ALREADY_DRAINING]
    assert len(early.conflicts) == 1 and early.conflicts[0].status == 409
    assert early.requests.requests == [] and not _evictions_of(server, ns)
    assert _holder(server, node_name) == first.lease.holder


def test_item14_a_dead_holders_lease_ends_and_the_retry_takes_the_drain_over(
        server: Server, ns: str, node_name: str, ec2_instance: tuple[AwsCloud, str]) -> None:
    cloud, iid = ec2_instance
    event = _world(server, ns, node_name, iid)
    # Given a holder whose invocation ended without finishing (its lease has passed)
    dead = _invocation(server, cloud, "dead", until=time.time() - 1)
    assert [o.outcome for o in dead.service.begin(event, lease=dead.lease)] == [Outcome.CORDONED]
    # When the message's retry handles it
    retry = _invocation(server, cloud, "retry")
    begun = retry.service.begin(event, lease=retry.lease)
    # Then the retry holds the drain and carries it on
    assert [o.outcome for o in begun] == [Outcome.CORDONED]
    assert _holder(server, node_name) == retry.lease.holder
