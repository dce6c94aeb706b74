"""A registering node wakes the provisioner (issue: pods waited for the 10-minute safety pass): the real
watcher service on the Kubernetes API emulator sees the node the previous pass launched register, its
wake-up goes to the real provisioner handler (moto server), and that woken pass registers and initialises
the node, also when the node's claim has already ended."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from autoscaler.adapters.aws.replacement import wake_payload
from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.adapters.kube.node_watch import KubeNodeWatch
from autoscaler.app.pod_watcher import PendingPodWatcher, WatcherSettings
from autoscaler.domain.keys import INITIALIZED_LABEL, UNREGISTERED_TAINT_KEY
from autoscaler.handlers.runtime import get_runtime
from simulator.kube_api import client_for
from simulator.local import LocalCluster

pytestmark = pytest.mark.e2e


class PayloadWaker:
    """The ProvisionerWaker port, keeping each payload the Lambda invoke would carry."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []

    def wake(self, *, reason: str, pods: int, resource_version: str = "") -> None:
        self.payloads.append(wake_payload(reason=reason, pods=pods, resource_version=resource_version))


@pytest.mark.parametrize("claim", ["still open", "already ended"])
def test_a_node_registering_after_the_launching_pass_is_registered_by_the_pass_it_wakes(
        local: LocalCluster, claim: str) -> None:
    # Given a warm container whose pass launched a node for a pending pod
    local.scale("inflate", 1)
    assert local.invoke_provisioner()["passes"][0]["launched"]
    if claim == "already ended":
        claims = get_runtime().claims
        claims.delete([c.claim_id for c in claims.claims()])
    # And a watcher of that cluster (its first run lists; the pod was woken for by an earlier container)
    waker = PayloadWaker()
    cluster = KubeCluster(client_for(local.kube.url))
    watcher = PendingPodWatcher(pods=cluster, nodes=KubeNodeWatch(cluster), waker=waker, clock=SystemClock(),
                                settings=WatcherSettings(batch_idle=0.2, batch_max=1.0))
    watcher.run(until=time.monotonic() + 0.3)
    waker.payloads.clear()
    # When the node registers (kubelet: the registration taint) while the watcher runs
    threading.Timer(0.2, lambda: local.register_nodes(bind=False)).start()
    watcher.run(until=time.monotonic() + 1.5)
    # Then the watcher woke the provisioner once for it, with the pods' version (the warm-cache path)
    (payload,) = waker.payloads
    assert payload["source"] == "watcher" and payload["reason"].startswith("1 node(s) registered")
    pod_version = local.kube.store.objects("pods")[0]["metadata"]["resourceVersion"]
    assert payload["resourceVersion"] == pod_version
    (name,) = [n["metadata"]["name"] for n in local.kube.store.objects("nodes")]
    # When that wake-up reaches the provisioner
    local.invoke_provisioner(payload)
    # Then the woken pass removed the registration taint and, the node being Ready, initialised it
    node = local.kube.store.get("nodes", None, name)
    assert all(t["key"] != UNREGISTERED_TAINT_KEY for t in node["spec"].get("taints") or []), claim
    assert node["metadata"]["labels"].get(INITIALIZED_LABEL) == "true", claim
