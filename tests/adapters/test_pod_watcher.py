"""The watcher service (app/pod_watcher.py) over KubeCluster against the Kubernetes API emulator:
batching, what counts as provisionable, resume, relist on 410, reconnect, warm state."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.pod_watcher import PendingPodWatcher, WatcherSettings, newest_version
from autoscaler.app.ports import CloudError, ProvisionerWaker
from autoscaler.domain.provisionable import is_provisionable
from simulator.kube_api import KubeApiServer, client_for
from tests.kube_objects import pod

UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available"}


def unschedulable(name: str, **kwargs: Any) -> dict[str, Any]:
    """A pod as the kube-scheduler leaves it when no node fits."""
    p = pod(name, **kwargs)
    p["status"]["conditions"] = [UNSCHEDULABLE]
    return p


@dataclass
class RecordingWaker:
    """The ProvisionerWaker port, recording each wake-up (the Lambda invoke is tested below)."""

    wakes: list[tuple[float, int]] = field(default_factory=list)
    fail: bool = False

    versions: list[str] = field(default_factory=list)

    def wake(self, *, reason: str, pods: int, resource_version: str = "") -> None:
        if self.fail:
            raise CloudError("invoke: AccessDeniedException", operation="invoke", code="AccessDeniedException")
        self.wakes.append((time.monotonic(), pods))
        self.versions.append(resource_version)


def watcher_for(kube_api: KubeApiServer, waker: RecordingWaker, *, idle: float = 0.3,
                maximum: float = 2.0) -> PendingPodWatcher:
    port: ProvisionerWaker = waker
    return PendingPodWatcher(pods=KubeCluster(client_for(kube_api.url), backoff_base=0.05), waker=port,
                             clock=SystemClock(),
                             settings=WatcherSettings(batch_idle=idle, batch_max=maximum, backoff_base=0.05))


def later(seconds: float, action: Any) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(seconds), action()), daemon=True)
    t.start()
    return t


@pytest.mark.parametrize(("case", "raw", "provisionable"), [
    ("marked Unschedulable by the scheduler", unschedulable("a"), True),
    ("not yet seen by the scheduler", pod("a"), False),
    ("bound", unschedulable("a", node="n1"), False),
    ("DaemonSet pod", unschedulable("a", owner_kind="DaemonSet"), False),
    ("mirror pod", unschedulable("a", annotations={"kubernetes.io/config.mirror": "x"}), False),
    ("preempting (nominated)", {**unschedulable("a"), "status": {
        "phase": "Pending", "nominatedNodeName": "n1", "conditions": [UNSCHEDULABLE]}}, False),
    ("being deleted", {**unschedulable("a"), "metadata": {
        "name": "a", "namespace": "default", "deletionTimestamp": "2026-01-01T00:00:00Z"}}, False),
])
def test_provisionable_is_karpenters_test(case: str, raw: dict[str, Any], provisionable: bool) -> None:
    # Given a pod in one state / Then only an unbound pod the scheduler marked Unschedulable counts
    assert is_provisionable(raw) is provisionable, case


def test_pods_arriving_together_wake_the_provisioner_once(kube_api: KubeApiServer) -> None:
    # Given a watcher on an empty cluster
    waker = RecordingWaker()
    watcher = watcher_for(kube_api, waker)
    # When three pods go unschedulable within the idle window, and one pod the scheduler has not marked
    def burst() -> None:
        for name in ("a", "b", "c"):
            kube_api.store.create("pods", unschedulable(name))
        kube_api.store.create("pods", pod("not-marked-yet"))
    started = time.monotonic()
    later(0.5, burst)
    run = watcher.run(until=started + 2.5)
    # Then one wake-up for the three, about one idle window after the last
    assert [n for _, n in waker.wakes] == [3]
    assert run.wakes == 1 and run.lists == 1 and run.connected
    assert 0.5 + 0.3 <= waker.wakes[0][0] - started < 0.5 + 0.3 + 0.7
    assert watcher.provisionable == {"default/a", "default/b", "default/c"}


def test_a_wake_up_names_the_newest_pod_version_of_its_batch(kube_api: KubeApiServer) -> None:
    # Given a watcher on an empty cluster
    waker = RecordingWaker()
    watcher = watcher_for(kube_api, waker)
    written: list[str] = []
    # When two pods go unschedulable in one batch, then a status update of the first arrives
    def burst() -> None:
        for name in ("a", "b"):
            written.append(kube_api.store.create("pods", unschedulable(name))["metadata"]["resourceVersion"])
    started = time.monotonic()
    later(0.3, burst)
    watcher.run(until=started + 2.0)
    # Then the one wake-up carries the second pod's version (the provisioner catches up to it)
    assert [n for _, n in waker.wakes] == [2]
    assert waker.versions == [max(written, key=int)]


@pytest.mark.parametrize(("a", "b", "newest"), [
    ("9", "10", "10"), ("10", "9", "10"), ("", "7", "7"), ("7", "", "7"), ("12", "x1", "x1"), ("x1", "12", "x1"),
])
def test_newest_version_compares_as_integers(a: str, b: str, newest: str) -> None:
    # Given two versions / Then the later by integer value wins; a non-integer wins (the provisioner relists)
    assert newest_version(a, b) == newest


def test_a_steady_trickle_is_cut_at_the_max_window(kube_api: KubeApiServer) -> None:
    # Given idle 0.5 s and max 1 s
    waker = RecordingWaker()
    watcher = watcher_for(kube_api, waker, idle=0.5, maximum=1.0)
    # When a pod goes unschedulable every 0.2 s for 2 s
    def trickle() -> None:
        for i in range(10):
            kube_api.store.create("pods", unschedulable(f"p{i}"))
            time.sleep(0.2)
    started = time.monotonic()
    later(0.2, trickle)
    watcher.run(until=started + 3.5)
    # Then the first batch closes at the max window, not when the trickle stops, and no pod is lost
    assert len(waker.wakes) >= 2
    assert waker.wakes[0][0] - started < 0.2 + 1.0 + 0.5
    assert sum(n for _, n in waker.wakes) == 10


def test_status_updates_and_bindings_do_not_wake_again(kube_api: KubeApiServer) -> None:
    # Given a pod already woken for
    kube_api.store.create("pods", unschedulable("web"))
    waker = RecordingWaker()
    watcher = watcher_for(kube_api, waker)
    watcher.run(until=time.monotonic() + 1.0)
    assert [n for _, n in waker.wakes] == [1]
    # When the scheduler updates its condition again, then binds it to a new node (it leaves the selection)
    def churn() -> None:
        kube_api.store.patch("pods", "default", "web", {"status": {"conditions": [
            {**UNSCHEDULABLE, "message": "0/4 nodes are available"}]}})
        kube_api.store.bind("default", "web", "n-new")
    later(0.2, churn)
    run = watcher.run(until=time.monotonic() + 1.5)
    # Then no second wake-up, the warm run did not list again, and the pod is forgotten
    assert len(waker.wakes) == 1
    assert run.lists == 0 and run.events >= 2
    assert watcher.provisionable == set()


def test_a_resume_past_compaction_lists_again_and_wakes_for_the_gap(kube_api: KubeApiServer) -> None:
    # Given a warm watcher whose resourceVersion is older than the API server keeps
    waker = RecordingWaker()
    watcher = watcher_for(kube_api, waker)
    watcher.run(until=time.monotonic() + 0.5)
    kube_api.store.create("pods", unschedulable("went-pending-in-the-gap"))
    kube_api.store.compact()
    # When it runs again
    run = watcher.run(until=time.monotonic() + 1.5)
    # Then it lists again (410 Gone) and wakes for the pod of the gap
    assert run.lists == 1
    assert [n for _, n in waker.wakes] == [1]
    assert "default/went-pending-in-the-gap" in watcher.provisionable


def test_a_dropped_stream_resumes_and_still_delivers(kube_api: KubeApiServer) -> None:
    # Given a watcher whose first watch stream is cut
    waker = RecordingWaker()
    watcher = watcher_for(kube_api, waker)
    kube_api.inject_error("/api/v1/pods", 0, 1, method="GET", query_substring="watch=1")
    # When a pod goes unschedulable afterwards
    later(0.5, lambda: kube_api.store.create("pods", unschedulable("late")))
    run = watcher.run(until=time.monotonic() + 2.0)
    # Then the stream was opened again and the pod woke the provisioner
    assert run.errors == 1
    assert [n for _, n in waker.wakes] == [1]


def test_errors_back_off_and_a_failed_wake_up_is_reported(kube_api: KubeApiServer) -> None:
    # Given an API server that refuses the list three times (RBAC not applied yet), and a waker that fails
    waker = RecordingWaker(fail=True)
    watcher = watcher_for(kube_api, waker)
    kube_api.store.create("pods", unschedulable("a"))
    kube_api.inject_error("/api/v1/pods", 403, 3, method="GET")
    # When it runs
    run = watcher.run(until=time.monotonic() + 2.0)
    # Then it backed off (0.05, 0.1, 0.2 s), listed, and reported the failed wake-up without raising
    assert run.errors == 3 and run.lists == 1
    assert run.wake_failures == 1 and run.wakes == 0


def test_a_batch_open_at_the_deadline_is_woken_before_returning(kube_api: KubeApiServer) -> None:
    # Given a pod that goes unschedulable just before the run ends
    waker = RecordingWaker()
    watcher = watcher_for(kube_api, waker, idle=5.0, maximum=10.0)
    later(0.3, lambda: kube_api.store.create("pods", unschedulable("last-second")))
    # When the run ends inside the batching window
    watcher.run(until=time.monotonic() + 1.0)
    # Then the batch was not dropped
    assert [n for _, n in waker.wakes] == [1]


def test_a_list_wakes_only_for_pods_marked_unschedulable_recently(kube_api: KubeApiServer) -> None:
    # Given pods the scheduler marked Unschedulable an hour ago (a previous watcher run woke for them) and
    # one it marked just now, found by a cold container's first list
    def marked(name: str, seconds_ago: float) -> dict[str, Any]:
        p = unschedulable(name)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))
        p["status"]["conditions"] = [{**UNSCHEDULABLE, "lastTransitionTime": stamp}]
        return p
    for name in ("stuck-1", "stuck-2"):
        kube_api.store.create("pods", marked(name, 3600))
    kube_api.store.create("pods", marked("fresh", 5))
    waker = RecordingWaker()
    watcher = watcher_for(kube_api, waker)
    # When it runs
    watcher.run(until=time.monotonic() + 1.0)
    # Then it wakes for the fresh pod only, and still knows all three
    assert [n for _, n in waker.wakes] == [1]
    assert watcher.provisionable == {"default/stuck-1", "default/stuck-2", "default/fresh"}
