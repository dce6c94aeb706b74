"""The watcher service (app/pod_watcher.py) over KubeCluster against the Kubernetes API emulator:
batching, what counts as provisionable, resume, relist on 410, reconnect, warm state.

Runs end on conditions, not on fixed windows: the watcher's injected clock is the system clock, which a test
moves past the run's (generous) deadline once what it waits for has happened. Batching is judged on that
clock's readings with lower bounds only (a wake-up no earlier than a window after the writes), and a window
that must not close a batch is set out of reach, so a busy machine makes a test slower, never wrong."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.pod_watcher import PendingPodWatcher, WatcherSettings, newest_version
from autoscaler.app.ports import CloudError, ProvisionerWaker
from autoscaler.domain.provisionable import is_provisionable
from simulator.kube_api import KubeApiServer, client_for
from tests.kube_objects import pod
from tests.waiting import wait_for

UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available"}


def unschedulable(name: str, **kwargs: Any) -> dict[str, Any]:
    """A pod as the kube-scheduler leaves it when no node fits."""
    p = pod(name, **kwargs)
    p["status"]["conditions"] = [UNSCHEDULABLE]
    return p


# A run's deadline: never reached when the test goes as it should (its condition ends the run first).
RUN_BOUND = 60.0
_nudges = itertools.count()


@dataclass
class EndableClock:
    """The system clock (the ``Clock`` port), which a test moves past every deadline to end a watch run as
    soon as what it waits for has happened."""

    skipped: float = 0.0

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def end(self) -> None:
        self.skipped += 1e6

    def deadline(self) -> float:
        return self.monotonic() + RUN_BOUND


@dataclass
class RecordingWaker:
    """The ProvisionerWaker port, recording each wake-up with the watcher's clock reading (the Lambda invoke
    is tested below); ``end_when`` ends the run once it holds after a wake-up (or a failed one)."""

    wakes: list[tuple[float, int]] = field(default_factory=list)
    fail: bool = False
    versions: list[str] = field(default_factory=list)
    attempts: int = 0
    clock: EndableClock = field(default_factory=EndableClock)
    end_when: Callable[[RecordingWaker], bool] | None = None

    def wake(self, *, reason: str, pods: int, resource_version: str = "") -> None:
        self.attempts += 1
        try:
            if self.fail:
                raise CloudError("invoke: AccessDeniedException", operation="invoke", code="AccessDeniedException")
            self.wakes.append((self.clock.monotonic(), pods))
            self.versions.append(resource_version)
        finally:
            if self.end_when is not None and self.end_when(self):
                self.clock.end()

    def woken_pods(self) -> int:
        return sum(n for _, n in self.wakes)


def watcher_for(kube_api: KubeApiServer, waker: RecordingWaker, *, idle: float = 0.3,
                maximum: float = 2.0) -> PendingPodWatcher:
    port: ProvisionerWaker = waker
    return PendingPodWatcher(pods=KubeCluster(client_for(kube_api.url), backoff_base=0.05), waker=port,
                             clock=waker.clock,
                             settings=WatcherSettings(batch_idle=idle, batch_max=maximum, backoff_base=0.05))


def when(condition: Callable[[], Any], action: Callable[[], Any], *, what: str) -> threading.Thread:
    """Do ``action`` once ``condition`` holds (e.g. once the watcher applied its first list)."""
    t = threading.Thread(target=lambda: (wait_for(condition, timeout=RUN_BOUND, what=what), action()), daemon=True)
    t.start()
    return t


def finish_when(kube_api: KubeApiServer, clock: EndableClock, condition: Callable[[], Any], *,
                what: str) -> threading.Thread:
    """End the run once ``condition`` holds: move the clock past its deadline, then write a pod the scheduler
    has not marked (never provisionable), whose event gets the run to read the clock. A batch still open is
    woken for as the run ends, so a wrongful one is seen however soon after the writes the run ends."""
    def finish() -> None:
        clock.end()
        kube_api.store.create("pods", pod(f"nudge-{next(_nudges)}"))
    return when(condition, finish, what=what)


def knows(watcher: PendingPodWatcher, key: str) -> Callable[[], bool]:
    """Whether the watcher has applied the pod ``key`` as provisionable."""
    return lambda: key in watcher.provisionable


def applied(version: Callable[[], str], written: str) -> Callable[[], bool]:
    """Whether the watcher's resourceVersion (read by ``version``) reached ``written``."""
    return lambda: (version() or "0").isdigit() and int(version() or "0") >= int(written)


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
    # Given a watcher on an empty cluster (idle window 1 s; the max window out of the run's reach)
    waker = RecordingWaker(end_when=lambda w: w.woken_pods() >= 3)
    watcher = watcher_for(kube_api, waker, idle=1.0, maximum=2 * RUN_BOUND)
    # When, once it has listed, a pod the scheduler has not marked and three unschedulable pods are written
    written_at: dict[str, float] = {}
    def burst() -> None:
        kube_api.store.create("pods", pod("not-marked-yet"))
        for name in ("a", "b", "c"):
            written_at[name] = waker.clock.monotonic()  # read before the write: the watcher sees it no sooner
            kube_api.store.create("pods", unschedulable(name))
    when(lambda: watcher.resource_version, burst, what="the watcher's first list")
    run = watcher.run(until=(until := waker.clock.deadline()))
    # Then one wake-up for the three, no sooner than one idle window after the last write, and before the
    # run's end (the max window being out of reach, the idle window closed the batch)
    assert [n for _, n in waker.wakes] == [3]
    assert run.wakes == 1 and run.lists == 1 and run.connected
    assert written_at["c"] + 1.0 <= waker.wakes[0][0] < until
    assert watcher.provisionable == {"default/a", "default/b", "default/c"}


def test_a_wake_up_names_the_newest_pod_version_of_its_batch(kube_api: KubeApiServer) -> None:
    # Given a watcher on an empty cluster
    waker = RecordingWaker(end_when=lambda w: w.woken_pods() >= 2)
    watcher = watcher_for(kube_api, waker, idle=1.0)
    written: list[str] = []
    # When two pods go unschedulable in one batch, then a status update of the first arrives
    def burst() -> None:
        for name in ("a", "b"):
            written.append(kube_api.store.create("pods", unschedulable(name))["metadata"]["resourceVersion"])
    when(lambda: watcher.resource_version, burst, what="the watcher's first list")
    watcher.run(until=waker.clock.deadline())
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
    # Given a max window of 1 s and an idle window out of the run's reach (the trickle never pauses that long)
    written: list[float] = []
    done = threading.Event()
    waker = RecordingWaker(end_when=lambda w: done.is_set() and w.woken_pods() == len(written))
    watcher = watcher_for(kube_api, waker, idle=2 * RUN_BOUND, maximum=1.0)
    # When a pod goes unschedulable every 0.1 s (each once the watcher applied the one before) until the
    # provisioner has been woken, and twice more after that
    def trickle() -> None:
        after_wake = 0
        while after_wake < 2:
            after_wake += bool(waker.wakes)
            key = f"default/p{len(written)}"
            written.append(waker.clock.monotonic())  # read before the write: the watcher sees it no sooner
            kube_api.store.create("pods", unschedulable(key.split("/")[1]))
            wait_for(knows(watcher, key), timeout=RUN_BOUND, what=key, interval=0.02)
            time.sleep(0.1)
        done.set()
    when(lambda: watcher.resource_version, trickle, what="the watcher's first list")
    watcher.run(until=(until := waker.clock.deadline()))
    # Then the first batch closed while the trickle went on: no sooner than the max window after the first
    # pod, before the run's end (the idle window being out of reach, the max window closed it); no pod is lost
    assert len(waker.wakes) >= 2
    assert written[0] + 1.0 <= waker.wakes[0][0] < until
    assert waker.woken_pods() == len(written) >= 3


def test_status_updates_and_bindings_do_not_wake_again(kube_api: KubeApiServer) -> None:
    # Given a pod already woken for
    kube_api.store.create("pods", unschedulable("web"))
    waker = RecordingWaker(end_when=lambda w: bool(w.wakes))
    watcher = watcher_for(kube_api, waker)
    watcher.run(until=waker.clock.deadline())
    assert [n for _, n in waker.wakes] == [1]
    # When the scheduler updates its condition again, then binds it to a new node (it leaves the selection)
    waker.end_when = None
    kube_api.store.patch("pods", "default", "web", {"status": {"conditions": [
        {**UNSCHEDULABLE, "message": "0/4 nodes are available"}]}})
    bound = str(kube_api.store.bind("default", "web", "n-new")["metadata"]["resourceVersion"])
    finish_when(kube_api, waker.clock, applied(lambda: watcher.resource_version, bound), what="the binding")
    run = watcher.run(until=waker.clock.deadline())
    # Then no second wake-up, the warm run did not list again, and the pod is forgotten
    assert len(waker.wakes) == 1
    assert run.lists == 0 and run.events >= 2
    assert watcher.provisionable == set()


def test_a_resume_past_compaction_lists_again_and_wakes_for_the_gap(kube_api: KubeApiServer) -> None:
    # Given a warm watcher whose resourceVersion is older than the API server keeps
    waker = RecordingWaker(end_when=lambda w: bool(w.wakes))
    watcher = watcher_for(kube_api, waker)
    finish_when(kube_api, waker.clock, lambda: watcher.resource_version, what="the first list")
    watcher.run(until=waker.clock.deadline())
    kube_api.store.create("pods", unschedulable("went-pending-in-the-gap"))
    kube_api.store.compact()
    # When it runs again
    run = watcher.run(until=waker.clock.deadline())
    # Then it lists again (410 Gone) and wakes for the pod of the gap
    assert run.lists == 1
    assert [n for _, n in waker.wakes] == [1]
    assert "default/went-pending-in-the-gap" in watcher.provisionable


def test_a_dropped_stream_resumes_and_still_delivers(kube_api: KubeApiServer) -> None:
    # Given a watcher whose first watch stream is cut
    waker = RecordingWaker(end_when=lambda w: bool(w.wakes))
    watcher = watcher_for(kube_api, waker)
    kube_api.inject_error("/api/v1/pods", 0, 1, method="GET", query_substring="watch=1")
    # When a pod goes unschedulable afterwards
    when(lambda: watcher.resource_version, lambda: kube_api.store.create("pods", unschedulable("late")),
         what="the watcher's first list")
    run = watcher.run(until=waker.clock.deadline())
    # Then the stream was opened again and the pod woke the provisioner
    assert run.errors == 1
    assert [n for _, n in waker.wakes] == [1]


def test_errors_back_off_and_a_failed_wake_up_is_reported(kube_api: KubeApiServer) -> None:
    # Given an API server that refuses the list three times (RBAC not applied yet), and a waker that fails
    waker = RecordingWaker(fail=True, end_when=lambda w: w.attempts >= 1)
    watcher = watcher_for(kube_api, waker)
    kube_api.store.create("pods", unschedulable("a"))
    kube_api.inject_error("/api/v1/pods", 403, 3, method="GET")
    # When it runs
    run = watcher.run(until=waker.clock.deadline())
    # Then it backed off (0.05, 0.1, 0.2 s), listed, and reported the failed wake-up without raising
    assert run.errors == 3 and run.lists == 1
    assert run.wake_failures == 1 and run.wakes == 0


def test_a_batch_open_at_the_deadline_is_woken_before_returning(kube_api: KubeApiServer) -> None:
    # Given a pod that goes unschedulable just before the run ends
    waker = RecordingWaker()
    watcher = watcher_for(kube_api, waker, idle=2 * RUN_BOUND, maximum=2 * RUN_BOUND)
    when(lambda: watcher.resource_version, lambda: kube_api.store.create("pods", unschedulable("last-second")),
         what="the watcher's first list")
    # When the run ends inside the batching window (once the pod is applied)
    finish_when(kube_api, waker.clock, lambda: "default/last-second" in watcher.provisionable, what="the pod")
    watcher.run(until=waker.clock.deadline())
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
    waker = RecordingWaker(end_when=lambda w: bool(w.wakes))
    watcher = watcher_for(kube_api, waker)
    # When it runs
    watcher.run(until=waker.clock.deadline())
    # Then it wakes for the fresh pod only, and still knows all three
    assert [n for _, n in waker.wakes] == [1]
    assert watcher.provisionable == {"default/stuck-1", "default/stuck-2", "default/fresh"}
