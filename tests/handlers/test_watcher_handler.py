"""The watcher Lambda handler: settings from the environment, the wake-up's Lambda invoke (a real boto3
client, its request captured at the HTTP boundary), and an invocation that fails when the API server was
never reached (the Errors alarm's signal)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from autoscaler.handlers import watcher as watcher_handler
from autoscaler.watcher_settings import WatcherEnv
from simulator.kube_api import KubeApiServer
from tests.adapters.test_node_watcher import registering
from tests.adapters.test_pod_watcher import unschedulable

REGION = "us-east-1"
FUNCTION = "cluster-a-provisioner"


@dataclass
class Context:
    """What the handler reads of Lambda's context."""

    remaining_ms: int

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class Invokes:
    session: Any  # a boto3 Session whose lambda clients answer Invoke here
    sent: list[dict[str, Any]]


@pytest.fixture
def invokes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Invokes]:
    """Every lambda:Invoke the handler's client sends, answered 202 as Lambda answers an async invoke."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    sent: list[dict[str, Any]] = []
    session = boto3.Session(region_name=REGION)

    def capture(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        sent.append({"headers": dict(params["headers"]), "body": json.loads(params["body"]),
                     "url": params["url_path"]})
        return AWSResponse("https://lambda", 202, {}, None), {"StatusCode": 202}

    session.events.register("before-call.lambda.Invoke", capture)
    yield Invokes(session, sent)
    watcher_handler.set_watcher(None)


def env_for(url: str) -> dict[str, str]:
    return {"AUTOSCALER_CLUSTER_NAME": "cluster-a", "AWS_REGION": REGION,
            "AUTOSCALER_PROVISIONER_FUNCTION": FUNCTION, "AUTOSCALER_KUBE_ENDPOINT": url,
            "AUTOSCALER_BATCH_IDLE_SECONDS": "0.2", "AUTOSCALER_BATCH_MAX_SECONDS": "1"}


def test_a_pending_pod_wakes_the_provisioner_with_an_async_invoke(
        kube_api: KubeApiServer, invokes: Invokes) -> None:
    # Given an unschedulable pod and a cold container
    created = kube_api.store.create("pods", unschedulable("web"))
    watcher_handler.set_watcher(watcher_handler.build_watcher(
        environ=env_for(kube_api.url), session=invokes.session))
    # When one invocation runs (1 s of watching: 4 s left minus the 3 s reserve)
    summary = watcher_handler.handler({"source": "schedule", "kind": "watcher"}, Context(4_000))
    # Then one asynchronous invoke of the provisioner carried the small wake-up payload, with the version the
    # provisioner's view must include (the list's, as the pod came from a list)
    sent = invokes.sent
    assert len(sent) == 1
    assert sent[0]["headers"]["X-Amz-Invocation-Type"] == "Event"
    assert FUNCTION in sent[0]["url"]
    assert sent[0]["body"] == {"source": "watcher", "kind": "provisioner",
                                  "reason": "1 pod(s) became unschedulable", "pods": 1,
                                  "resourceVersion": summary["resourceVersion"]}
    assert int(summary["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])
    assert summary["wakes"] == 1 and summary["waitingPods"] == 1


def test_a_registering_node_of_ours_wakes_the_provisioner(kube_api: KubeApiServer, invokes: Invokes) -> None:
    # Given a node of ours the kubelet just registered (NodePool label, the registration taint) and a cold
    # container of the deployed handler
    kube_api.store.create("nodes", registering("n1"))
    watcher_handler.set_watcher(watcher_handler.build_watcher(
        environ=env_for(kube_api.url), session=invokes.session))
    # When one invocation runs
    summary = watcher_handler.handler({"source": "schedule", "kind": "watcher"}, Context(4_000))
    # Then it woke the provisioner for the node, without a pod version (no pod exists: the pass lists)
    assert [s["body"] for s in invokes.sent] == [{"source": "watcher", "kind": "provisioner",
                                                  "reason": "1 node(s) registered", "pods": 0}]
    assert summary["wokenNodes"] == 1 and summary["waitingNodes"] == 1


def test_an_invocation_that_never_reached_the_api_server_fails(invokes: Invokes) -> None:
    # Given an API endpoint nothing listens on
    watcher_handler.set_watcher(watcher_handler.build_watcher(
        environ=env_for("http://127.0.0.1:9"), session=invokes.session))
    # When an invocation runs / Then it fails, so the function's Errors metric (and alarm) see it
    with pytest.raises(RuntimeError, match="could not list or watch pods"):
        watcher_handler.handler({}, Context(3_500))
    assert invokes.sent == []


@pytest.mark.parametrize(("env", "message"), [
    ({}, "AUTOSCALER_CLUSTER_NAME is not set"),
    ({"AUTOSCALER_CLUSTER_NAME": "a", "AWS_REGION": "r"}, "AUTOSCALER_PROVISIONER_FUNCTION is not set"),
    ({**env_for("x"), "AUTOSCALER_BATCH_IDLE_SECONDS": "1s"}, "AUTOSCALER_BATCH_IDLE_SECONDS='1s' is not a number"),
    ({**env_for("x"), "AUTOSCALER_BATCH_MAX_SECONDS": "0"}, "must be more than 0"),
])
def test_settings_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    # Given a malformed environment / Then the error names the variable and what to write
    with pytest.raises(ValueError, match=message):
        WatcherEnv.from_environ(env)
