"""Which invocations catch the provisioner's warm cache up and how (handlers/provisioner.py's
``sync_cluster_cache``): a watcher's wake-up with a resourceVersion catches up to it (a woken pass); every
other invocation but watch mode's catches up until quiet (or lists when the resync period has passed);
watch mode lists on every read."""

from __future__ import annotations

from typing import Any, cast

import pytest

from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.handlers.provisioner import parse_event, sync_cluster_cache
from autoscaler.handlers.runtime import Runtime, WarmState
from simulator.kube_api import KubeApiServer, client_for


class _Runtime:
    """The part of ``Runtime`` the rule needs: the cluster adapter and the warm state that owns its cache."""

    cluster_cache = Runtime.cluster_cache
    use_cluster_cache = Runtime.use_cluster_cache

    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster, self.clock, self.warm = cluster, SystemClock(), WarmState()


@pytest.mark.parametrize(("case", "payload", "watch", "expected"), [
    ("the watcher's wake-up", {"source": "watcher", "pods": 2, "resourceVersion": "41"}, False, ("marker 41", True)),
    ("a wake-up without a version (an older watcher)", {"source": "watcher", "pods": 2}, False,
     ("catch-up", False)),
    ("the scheduled pass", {"source": "schedule"}, False, ("catch-up", False)),
    ("a replacement request", {"source": "interruption", "kind": "replacement", "nodes": ["n1"]}, False,
     ("catch-up", False)),
    ("a watch-mode invocation", {"source": "schedule"}, True, ("list", False)),
])
def test_each_invocation_reads_by_its_rule(kube_api: KubeApiServer, case: str, payload: dict[str, Any],
                                             watch: bool, expected: tuple[str, bool]) -> None:
    # Given a provisioner runtime whose cache is warm from an earlier invocation
    runtime = cast(Runtime, _Runtime(KubeCluster(client_for(kube_api.url))))
    sync_cluster_cache(runtime, parse_event({"source": "watcher", "resourceVersion": "1"}), watch=False)
    # When this invocation's payload arrives
    got = sync_cluster_cache(runtime, parse_event(payload), watch=watch)
    # Then its rule is the table's, and only a woken pass describes just its claims' instances
    assert runtime.cluster.cache is not None
    assert (runtime.cluster.cache.rule, got) == expected, case
