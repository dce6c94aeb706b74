"""Scenarios on the real control plane, in real time: the guides' inflate 0 -> 5 -> 0 with the registration
race, and a spot interruption drained under a PodDisruptionBudget. Each asserts that every pod was bound by
kube-scheduler and Running, that no launch was duplicated, and that no pod was evicted against its PDB."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e.real_kube.conftest import RealCluster
from tests.waiting import wait_for

pytestmark = [pytest.mark.real_kube, pytest.mark.e2e]


def test_inflate_zero_to_five_to_zero(real_cluster: RealCluster) -> None:
    env = real_cluster
    env.runtime()
    env.deployment("inflate", 5)
    wait_for(lambda: len(env.pods("app=inflate")) == 5, what="the Deployment's five pods")

    env.provision()
    launched = env.ec2_instances()
    assert launched, "nothing launched for five pending pods"
    # The registration race: passes while the nodes register launch nothing more.
    wait_for(lambda: env.running("app=inflate", 5), step=env.provision, timeout=120,
             what="five inflate pods bound by kube-scheduler and Running")
    pods = env.running("app=inflate", 5)
    assert pods is not None
    env.scheduled_by_kube_scheduler(pods)
    env.no_duplicate_launches()
    assert len(env.ec2_instances()) == len(launched)
    # Registered nodes lost the registration taint (the autoscaler's lifecycle), as Karpenter does.
    assert all(not any(t["key"] == "karpenter.sh/unregistered" for t in n["spec"].get("taints") or ())
               for n in env.nodes())

    env.deployment("inflate", 0)
    wait_for(lambda: not env.pods("app=inflate"), what="the pods gone")
    # consolidateAfter 2s: passes until the empty nodes are gone and their instances terminated.
    wait_for(lambda: not env.nodes(), step=env.disrupt, timeout=120, what="the empty nodes removed")
    wait_for(lambda: not env.instances(), what="their instances terminated")
    env.no_duplicate_launches()


def _sqs_records(event: dict[str, Any]) -> dict[str, Any]:
    return {"Records": [{"messageId": "m-1", "receiptHandle": "r-1", "body": json.dumps(event),
                         "attributes": {}, "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                         "eventSourceArn": "arn:aws:sqs:us-east-1:123456789012:interruption",
                         "awsRegion": "us-east-1"}]}


def _spot_warning(instance_id: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"version": "0", "id": f"spot-{instance_id}", "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2", "account": "123456789012", "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1", "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"}}


def test_spot_interruption_drains_under_a_pdb(real_cluster: RealCluster) -> None:
    from autoscaler.handlers.interruption import handler

    env = real_cluster
    env.runtime()
    env.deployment("web", 4)
    env.apply(f"/apis/policy/v1/namespaces/{env.ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": env.ns},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}}})
    wait_for(lambda: env.running("app=web", 4), step=env.provision, timeout=120, what="four web pods Running")
    launched = {i["InstanceId"] for i in env.ec2_instances()}
    victim_node = env.nodes()[0]
    victim = victim_node["spec"]["providerID"].rsplit("/", 1)[-1]
    on_victim = [p["metadata"]["name"] for p in env.pods("app=web") if p["spec"]["nodeName"] ==
                 victim_node["metadata"]["name"]]
    assert on_victim

    answers: list[Any] = []
    with env.budget_kept("app=web", 3):
        # The interruption function drains while the provisioner keeps running (its schedule and the
        # watcher's wake-ups; separate Lambda invocations in AWS, a thread here).
        drain = threading.Thread(target=lambda: answers.append(env.invoke(
            handler, _sqs_records(_spot_warning(victim)), function_name="interruption")), name="interruption")
        drain.start()
        # Drained through the eviction API: the disruption controller's budget let them go one at a time, the
        # Deployment replaced them, the scheduler placed the replacements (on capacity the provisioner adds).
        wait_for(lambda: env.running("app=web", 4) and not any(
            p["spec"]["nodeName"] == victim_node["metadata"]["name"] for p in env.pods("app=web")),
            step=env.provision, timeout=180, what="the web pods running elsewhere")
        drain.join(timeout=180)
    assert answers == [{"batchItemFailures": []}]
    pods = env.running("app=web", 4)
    assert pods is not None
    env.scheduled_by_kube_scheduler(pods)
    new = {i["InstanceId"] for i in env.ec2_instances()} - launched
    assert len(new) <= 1, f"one interruption asked for {len(new)} replacement instances"
    env.no_duplicate_launches()
