"""EC2's CreateFleet client-token rules, held by the strict stand-in (``simulator.ec2_tokens``) the same way
whichever moto a test reaches: in-process (``mock_aws``, what the adapter tests use) and the moto server
(what the end-to-end tests use). Issue 33 item 11.

- the same token with the same parameters is answered with the first fleet: no new launch;
- the same token with other parameters is refused with ``IdempotentParameterMismatch``;
- an answer lost after EC2 acted is resent by botocore and answered from the first: one launch;
- after an uncertain CreateFleet (every answer lost) the adapter sends nothing under another capacity
  type or a new token, and launching the same claim again gets the instance EC2 launched the first time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.aws.fleet import client_token
from autoscaler.adapters.clock import ManualClock
from autoscaler.app.launcher import new_claim_id
from autoscaler.domain.fleet import FleetRequest
from simulator.ec2_tokens import ClientTokens
from simulator.local import moto_catalog
from tests.adapters.aws.helpers import CLUSTER, REGION, make_network, node_class, seed_eks_amis
from tests.moto_env import moto_environment, moto_server_environment, running_moto_server

MOTOS = ("in-process", "server")


@dataclass
class Ec2:
    """One moto (in-process or server), its EC2 client and the token stand-in every send goes through."""

    kind: str
    session: Any
    client: Any
    tokens: ClientTokens

    def live_instances(self) -> list[str]:
        return sorted(i["InstanceId"] for r in self.client.describe_instances()["Reservations"]
                      for i in r["Instances"] if i["State"]["Name"] not in ("terminated", "shutting-down"))


@pytest.fixture(scope="module")
def moto_server() -> Iterator[ThreadedMotoServer]:
    with running_moto_server() as server:
        yield server


@pytest.fixture(params=MOTOS)
def ec2(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ec2]:
    if request.param == "in-process":
        with moto_environment(monkeypatch, REGION):
            yield _ec2("in-process")
        return
    server: ThreadedMotoServer = request.getfixturevalue("moto_server")
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    moto_server_environment(monkeypatch, endpoint, REGION)
    assert os.environ["AWS_ENDPOINT_URL"] == endpoint
    yield _ec2("server")


def _ec2(kind: str) -> Ec2:
    session = boto3.Session(region_name=REGION)
    tokens = ClientTokens().install(session.events)  # before the clients: each copies the session's handlers
    return Ec2(kind=kind, session=session, client=session.client("ec2"), tokens=tokens)


def _fleet(ec2: Ec2, *, token: str, instance_type: str = "m5.large", capacity_type: str = "on-demand") -> Any:
    client = ec2.client
    network = getattr(ec2, "_network", None) or make_network(client)
    ec2._network = network  # type: ignore[attr-defined]  # one network per test
    template = getattr(ec2, "_template", None) or client.create_launch_template(
        LaunchTemplateName=f"lt-{ec2.kind}", LaunchTemplateData={"ImageId": "ami-12c6146b"},
    )["LaunchTemplate"]["LaunchTemplateId"]
    ec2._template = template  # type: ignore[attr-defined]
    return client.create_fleet(
        Type="instant", ClientToken=token,
        LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Latest"},
                                "Overrides": [{"InstanceType": instance_type,
                                               "SubnetId": network.subnets["us-east-1a"]}]}],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": capacity_type})


def _ids(answer: Any) -> list[str]:
    return sorted(i for inst in answer.get("Instances", ()) for i in inst.get("InstanceIds", ()))


def test_item11_the_same_token_and_parameters_get_the_first_fleet_and_launch_nothing_new(ec2: Ec2) -> None:
    first = _fleet(ec2, token="contract-same")
    again = _fleet(ec2, token="contract-same")
    assert _ids(first) and _ids(again) == _ids(first)
    assert ec2.live_instances() == _ids(first), f"{ec2.kind}: a replayed CreateFleet launched again"
    assert ec2.tokens.replayed == 1


def test_item11_the_same_token_with_other_parameters_is_refused(ec2: Ec2) -> None:
    first = _fleet(ec2, token="contract-mismatch")
    with pytest.raises(ClientError) as refused:
        _fleet(ec2, token="contract-mismatch", instance_type="m5.xlarge")
    assert refused.value.response["Error"]["Code"] == "IdempotentParameterMismatch"
    assert ec2.live_instances() == _ids(first)
    assert ec2.tokens.mismatched == 1


def test_item11_an_answer_lost_after_ec2_acted_is_resent_and_launches_once(ec2: Ec2) -> None:
    ec2.tokens.lose_responses(2)
    answer = _fleet(ec2, token="contract-lost")
    assert ec2.tokens.replayed == 2  # botocore's two resends, each answered from the first
    assert ec2.live_instances() == _ids(answer)


def _cloud(ec2: Ec2) -> AwsCloud:
    session = ec2.session
    make_network(ec2.client)
    seed_eks_amis(ec2.client)
    cloud = AwsCloud(ec2=ec2.client, ssm=session.client("ssm"), iam=session.client("iam"),
                     pricing=session.client("pricing", region_name=REGION), region=REGION, cluster=CLUSTER,
                     clock=ManualClock(), catalog_ttl=3600)
    cloud.catalog.load(*moto_catalog(REGION))
    return cloud


def test_item11_after_an_uncertain_create_fleet_the_claim_is_never_launched_under_another_type_or_token(
        ec2: Ec2) -> None:
    # Given a launch that may be spot or on-demand, whose every CreateFleet answer is lost after EC2 acted
    cloud = _cloud(ec2)
    sent: list[tuple[str, str]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        sent.append((params["ClientToken"], params["TargetCapacitySpecification"]["DefaultTargetCapacityType"]))

    ec2.client.meta.events.register("provide-client-params.ec2.CreateFleet", record)
    request = FleetRequest(claim_id=new_claim_id("general"), cluster_name=CLUSTER.name, node_pool="general",
                           node_class=node_class(), capacity_types=("spot", "on-demand"),
                           instance_types=("m5.large", "m5a.large"), zones=("us-east-1a",))
    spot_token = client_token(request.claim_id, "spot", 0)
    ec2.tokens.lose_responses(100)
    # When it is launched
    lost = cloud.launch(request)
    # Then the outcome is uncertain, only the spot request with its one token was made (no on-demand
    # fallback under a new token), and EC2 launched one instance for it
    assert lost.uncertain and not lost.launched, lost.errors
    assert sent == [(spot_token, "spot")]
    launched = ec2.live_instances()
    assert len(launched) == 1
    # When the answers come back and the claim is launched again (the next pass resumes it)
    ec2.tokens.lose_responses(0)
    again = cloud.launch(request)
    # Then the same token is answered with the instance EC2 launched the first time: nothing new
    assert again.complete and [i.instance_id for i in again.launched] == launched
    assert sent == [(spot_token, "spot")] * 2 and ec2.tokens.mismatched == 0
    assert ec2.live_instances() == launched
