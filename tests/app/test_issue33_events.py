"""Issue 33 item 23: Kubernetes Events that cannot be written are logged, not only counted."""

from __future__ import annotations

import logging

import pytest

from autoscaler.adapters.clock import ManualClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.pod_events import PodEvent, PodEvents
from simulator.kube_api import KubeApiServer, client_for
from tests.kube_objects import pod


def test_item23_events_write_failures_are_logged_as_a_warning_with_count_and_first_error(
        kube_api: KubeApiServer, caplog: pytest.LogCaptureFixture) -> None:
    # Given three pods and an API server that refuses Events (RBAC without events: create)
    clock = ManualClock()
    cluster = KubeCluster(client_for(kube_api.url), clock=clock, sleep=clock.advance, backoff_base=1.0,
                          backoff_max=4.0)
    for i in range(3):
        kube_api.store.create("pods", pod(f"p{i}"))
    pods = [p for p in (cluster.get_pod("default", f"p{i}") for i in range(3)) if p is not None]
    kube_api.inject_error("/events", 403, 100)
    # When the pass sends their Events
    with caplog.at_level(logging.WARNING, logger="autoscaler.app.pod_events"):
        sent = PodEvents(cluster, clock).send([PodEvent(p, "FailedScheduling", "no offering", "Warning")
                                               for p in pods])
    # Then they are counted, and one warning line says how many and why
    assert sent.failed == 3
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1, lines
    assert "3 Kubernetes Events could not be recorded" in lines[0] and "403" in lines[0], lines[0]
