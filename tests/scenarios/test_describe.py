"""The simulation's DescribeInstances stand-in (simulator/sim/describe.py) answers exactly what moto
answers, for every request shape the handlers send, as instances launch, change and terminate."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from simulator.local import LocalCluster
from simulator.moto_server import MOTO_LOCK
from simulator.sim.describe import FastDescribeInstances

pytestmark = pytest.mark.e2e

TAG = "karpenter.sh/nodepool"


def _answer(client: Any, **params: Any) -> list[dict[str, Any]]:
    """Every page's reservations, without the per-request metadata."""
    out: list[dict[str, Any]] = []
    token = None
    while True:
        resp = client.describe_instances(**params, **({"NextToken": token} if token else {}))
        out.extend(resp["Reservations"])
        token = resp.get("NextToken")
        if not token:
            return out


@pytest.mark.parametrize(("case", "params"), [
    ("everything", {}),
    ("by tag value", {"Filters": [{"Name": f"tag:{TAG}", "Values": ["default"]}]}),
    ("by tag key and state", {"Filters": [{"Name": "tag-key", "Values": [TAG, "other"]},
                                          {"Name": "instance-state-name", "Values": ["pending", "running"]}]}),
    ("paged by two reservations", {"MaxResults": 5}),
])
def test_fast_answer_is_motos_answer(case: str, params: dict[str, Any], moto_server: ThreadedMotoServer) -> None:
    with LocalCluster.start(moto_server=moto_server) as env:
        # Given a session with the stand-in and a plain one asking moto itself
        fast = FastDescribeInstances(env.config.region, MOTO_LOCK,
                                     lambda: env.session.client("ec2")).install(env.session.events)
        ours, motos = env.session.client("ec2"), boto3.Session(region_name=env.config.region).client("ec2")
        image = motos.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        # And instances in several reservations: tagged or not, one terminated, one re-tagged
        ids = []
        for n, tags in enumerate([{TAG: "default"}, {TAG: "banana"}, {}, {TAG: "default", "x": "1"}] * 2):
            spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
            ids += [i["InstanceId"] for i in ours.run_instances(
                ImageId=image, MinCount=1 + n % 2, MaxCount=1 + n % 2, InstanceType="m5.large",
                **({"TagSpecifications": spec} if tags else {}))["Instances"]]
        first = _answer(ours, **params)
        ours.terminate_instances(InstanceIds=ids[:1])
        ours.create_tags(Resources=ids[1:2], Tags=[{"Key": TAG, "Value": "default"}])
        # When both answer, before and after the changes, and by instance ids
        second = _answer(ours, **params)
        # Then the answers are moto's, and the stand-in answered them
        assert second == _answer(motos, **params), case
        assert first != second or case == "paged by two reservations"
        a, b = _answer(ours, InstanceIds=ids[1:4]), _answer(motos, InstanceIds=ids[1:4])  # by ids
        assert a == b
        assert fast.answered >= 3


def test_more_than_a_page_of_reservations(moto_server: ThreadedMotoServer) -> None:
    with LocalCluster.start(moto_server=moto_server) as env:
        # Given 105 reservations (moto pages by 100 of them, even for instance ids)
        fast = FastDescribeInstances(env.config.region, MOTO_LOCK,
                                     lambda: env.session.client("ec2")).install(env.session.events)
        ours, motos = env.session.client("ec2"), boto3.Session(region_name=env.config.region).client("ec2")
        image = motos.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        ids = [ours.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.large")["Instances"][0]
               ["InstanceId"] for _ in range(105)]
        # When every instance is asked for, by filter and by ids, then the answers are moto's, from the stand-in
        flt = {"Filters": [{"Name": "instance-state-name", "Values": ["running"]}], "MaxResults": 1000}
        assert _answer(ours, **flt) == _answer(motos, **flt)
        assert _answer(ours, InstanceIds=ids) == _answer(motos, InstanceIds=ids)
        assert fast.answered >= 3
