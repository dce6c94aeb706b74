"""The one service-model loader the test process and the simulator share (simulator/botocore_models.py)."""

from __future__ import annotations

import boto3
import botocore.loaders
import botocore.session
import pytest

from simulator.botocore_models import one_loader_per_process


def test_sessions_made_after_it_share_one_loader_and_their_clients_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test process installed it at start-up (tests/moto_cost.py): undo that to see the difference.
    monkeypatch.setattr(botocore.session, "create_loader", botocore.loaders.create_loader)
    apart = [boto3.Session(region_name="us-east-1")._session.get_component("data_loader") for _ in range(2)]
    assert apart[0] is not apart[1]
    one_loader_per_process()
    one_loader_per_process()  # idempotent: the same loader, not a second one
    first, second = boto3.Session(region_name="us-east-1"), boto3.Session(region_name="eu-west-1")
    loader = first._session.get_component("data_loader")
    assert second._session.get_component("data_loader") is loader
    ec2 = second.client("ec2", aws_access_key_id="x", aws_secret_access_key="y")
    assert ec2.meta.region_name == "eu-west-1"
    assert "RunInstances" in ec2.meta.service_model.operation_names


def test_a_session_keeps_its_own_handlers_and_credentials() -> None:
    one_loader_per_process()
    first, second = botocore.session.Session(), botocore.session.Session()
    first.set_credentials("a", "b")
    assert second.get_credentials() is None or second.get_credentials().access_key != "a"
    assert first.get_component("event_emitter") is not second.get_component("event_emitter")
