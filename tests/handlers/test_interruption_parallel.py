"""Parallel drains and the handler's deadline (issue 18 items 1 and 2), through the real handler against
moto and the Kubernetes API emulator with graceful pod deletion (pods stay terminating until a kubelet
stand-in removes them)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from simulator.local import LambdaContext
from tests.handlers.interruption_world import FUNCTION, World, event_for, sqs_record


def _kubelet_when_all_evicted(world: World, expected: int, *, fallback: float) -> dict[str, int]:
    """Removes terminating pods only once ``expected`` pods are terminating at the same time (or after
    ``fallback`` seconds): with sequential drains the first node's pods would never go before the rest
    are evicted."""
    seen: dict[str, int] = {"terminating_at_first_removal": 0}

    def run() -> None:
        end = time.monotonic() + fallback
        while time.monotonic() < end:
            terminating = sum(1 for p in world.kube.store.objects("pods")
                              if p["metadata"].get("deletionTimestamp"))
            if terminating >= expected:
                break
            time.sleep(0.02)
        seen["terminating_at_first_removal"] = sum(1 for p in world.kube.store.objects("pods")
                                                   if p["metadata"].get("deletionTimestamp"))
        stop = time.monotonic() + fallback * 4
        while time.monotonic() < stop and world.kube.store.finish_terminating() >= 0:
            if not any(p["metadata"].get("deletionTimestamp") for p in world.kube.store.objects("pods")) \
                    and seen.get("done"):
                return
            time.sleep(0.05)

    threading.Thread(target=run, daemon=True).start()
    return seen


def test_ten_spot_warnings_in_one_batch_are_all_evicting_before_any_pod_is_gone(world: World) -> None:
    world.kube.store.graceful_deletion = True
    ids = []
    for i in range(10):
        ids.append(world.add_node(f"n{i}", owned=False))
        world.add_pod(f"app-{i}", f"n{i}")
    # A generous fallback: a busy machine may take seconds to start ten drains; only sequential drains (one
    # pod terminating at a time) make the kubelet wait it out, and then the count below fails.
    seen = _kubelet_when_all_evicted(world, 10, fallback=30.0)
    response = world.run(*[event_for("spot-interruption-warning", iid) for iid in ids])
    seen["done"] = 1
    assert response == {"batchItemFailures": []}
    assert seen["terminating_at_first_removal"] == 10  # sequential drains: 1
    assert sorted(world.evictions()) == sorted(f"default/app-{i}" for i in range(10))


def test_a_health_event_naming_40_nodes_starts_no_drain_past_the_invocation_deadline(world: World) -> None:
    world.kube.store.graceful_deletion = True  # no kubelet: every drain lasts until its deadline
    ids = []
    for i in range(40):
        ids.append(world.add_node(f"h{i:02d}", owned=False))
        world.add_pod(f"app-{i:02d}", f"h{i:02d}")
    started = time.monotonic()
    # 22 s left less the 10 s safety margin: 12 s of draining (the remaining time is real time, so the cordon
    # pass over 40 nodes must leave room for the first pool even on a loaded CI machine).
    response = world.run(event_for("health-scheduled-change", *ids), message_ids=["health"], remaining_ms=22_000)
    elapsed = time.monotonic() - started
    assert response == {"batchItemFailures": [{"itemIdentifier": "health"}]}  # comes back for the rest
    assert len(world.evictions()) == 10  # one pool's worth; sequential drains sent one pass to all 40
    # The drains stopped at the invocation's deadline, not at their own: without a kubelet each would otherwise
    # last its event's 120 s window. The bound sits far from both (12 s of draining, 120 s per pool) so a busy
    # machine cannot fail it, while a handler ignoring its deadline still does.
    assert elapsed < 60.0
    assert all(world.node(f"h{i:02d}")["spec"].get("unschedulable") for i in range(40))  # type: ignore[index]


def test_a_throttled_replacement_invoke_never_stops_the_cordon_or_the_drain(world: World) -> None:
    # Issue 18 item 5: the provisioner Invoke throttled (after botocore's own retries) made the cordon step throw.
    iid = world.add_node("n1", owned=False)
    world.add_pod("web-1", "n1")
    world.invokes.fail_with = "TooManyRequestsException"
    response = world.run(event_for("spot-interruption-warning", iid), message_ids=["m"])
    assert response == {"batchItemFailures": []}
    node = world.node("n1")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert world.evictions() == ["default/web-1"]
    assert len(world.invokes.calls) >= 2  # asked in the cordon pass and again by the message's own pass


def test_a_failed_spot_message_comes_back_within_the_notice(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 18 item 5: the queue's visibility timeout (130 s) exceeds the 120 s notice; a failed message must
    # come back after RETRY_VISIBILITY_SECONDS instead. Real moto SQS: the receipt handle is a real one.
    from autoscaler.app import interruption_batch
    from autoscaler.handlers import interruption as handler_module

    monkeypatch.setattr(interruption_batch, "RETRY_VISIBILITY_SECONDS", 1)
    sqs = world.rt.client("sqs")
    url = sqs.create_queue(QueueName="interruption", Attributes={"VisibilityTimeout": "130"})["QueueUrl"]
    iid = world.add_node("n1", owned=False)
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(event_for("spot-interruption-warning", iid)))
    msg = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"][0]
    world.kube.inject_error("/api/v1/nodes/n1", 403, count=1000, method="PATCH")  # the cordon cannot land
    record = sqs_record(msg["Body"], message_id=msg["MessageId"])
    record["receiptHandle"] = msg["ReceiptHandle"]
    response = handler_module.handler({"Records": [record]}, LambdaContext(function_name=FUNCTION,
                                                                           remaining_ms=60_000))
    assert response == {"batchItemFailures": [{"itemIdentifier": msg["MessageId"]}]}
    time.sleep(1.5)
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1).get("Messages") or []
    assert [m["MessageId"] for m in again] == [msg["MessageId"]]
