"""The warm, watch-fed pods and nodes (adapters/kube/informer.py) behind ``KubeCluster.pods()`` / ``nodes()``,
against the Kubernetes API emulator: requests are counted on the emulator, so "no list" is what the API
server saw."""

from __future__ import annotations

import pytest

from autoscaler.adapters.clock import ManualClock, SystemClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.adapters.kube.informer import CacheSettings, ClusterCache
from simulator.kube_api import KubeApiServer, client_for
from tests.kube_objects import node, pod


def lists(kube_api: KubeApiServer, resource: str) -> int:
    """List requests the emulator served for ``resource`` (GETs of the collection that were not watches)."""
    watches = sum(1 for path in kube_api.store.watches if path.endswith(f"/{resource}"))
    return kube_api.requests().get(f"GET {resource}", 0) - watches


def cached(kube_api: KubeApiServer, **settings: float) -> KubeCluster:
    cluster = KubeCluster(client_for(kube_api.url), page_size=2)
    # A quiet window wide enough for a loaded 2-core machine; the product's default is 50 ms.
    cluster.cache = ClusterCache(cluster, clock=SystemClock(),
                                 settings=CacheSettings(**{"quiet_seconds": 0.3, **settings}))
    return cluster


def rv(obj: dict[str, object]) -> str:
    return str(obj["metadata"]["resourceVersion"])  # type: ignore[index]


def keys(cluster: KubeCluster) -> list[str]:
    return [p.key for p in cluster.pods()]


def test_the_first_read_lists_and_later_reads_apply_the_watch(kube_api: KubeApiServer) -> None:
    # Given a cluster with three pods and a node, read once (the cache lists, page by page)
    st = kube_api.store
    for name in ("a", "b", "c"):
        st.create("pods", pod(name))
    st.create("nodes", node("n1"))
    cluster = cached(kube_api)
    assert keys(cluster) == ["default/a", "default/b", "default/c"]
    assert [n.name for n in cluster.nodes()] == ["n1"]
    assert (lists(kube_api, "pods"), lists(kube_api, "nodes")) == (2, 1)  # two pages of pods
    # When a pod is added, one is bound, one is deleted, and a node joins
    st.create("pods", pod("aa", namespace="team"))
    st.bind("default", "a", "n1")
    st.delete("pods", "default", "b")
    st.create("nodes", node("n0"))
    # Then the next reads show exactly that, in the API's order, without listing again
    assert keys(cluster) == ["default/a", "default/c", "team/aa"]
    assert next(p for p in cluster.pods() if p.name == "a").node_name == "n1"
    assert [n.name for n in cluster.nodes()] == ["n0", "n1"]
    assert (lists(kube_api, "pods"), lists(kube_api, "nodes")) == (2, 1)
    # And filtered reads still ask the API server (the cache holds the whole collections only)
    assert [p.key for p in cluster.pods(node_name="n1")] == ["default/a"]
    assert lists(kube_api, "pods") == 3


def test_a_wake_up_catches_up_to_its_version_without_listing(kube_api: KubeApiServer) -> None:
    # Given a warm cache
    cluster = cached(kube_api)
    cluster.pods()
    assert cluster.cache is not None
    listed, watched = lists(kube_api, "pods"), len(kube_api.store.watches)
    # When a pod is written after the cache's last read and a wake-up names its version
    created = kube_api.store.create("pods", pod("late"))
    cluster.cache.expect(rv(created))
    # Then the read includes it (the watch delivered it) and nothing was listed
    assert keys(cluster) == ["default/late"]
    assert lists(kube_api, "pods") == listed and len(kube_api.store.watches) == watched + 1
    # And a second read at the same marker makes no request at all: the cache is already past it
    before = kube_api.requests().get("GET pods", 0)
    assert keys(cluster) == ["default/late"]
    assert kube_api.requests().get("GET pods", 0) == before


def test_list_always_lists_on_every_read(kube_api: KubeApiServer) -> None:
    # Given a warm cache put in watch mode's rule
    cluster = cached(kube_api)
    cluster.pods()
    assert cluster.cache is not None
    cluster.cache.list_always()
    # When it is read twice / Then it lists twice
    cluster.pods()
    cluster.pods()
    assert lists(kube_api, "pods") == 3


def test_410_gone_lists_again(kube_api: KubeApiServer) -> None:
    # Given a warm cache whose version the API server has compacted away
    cluster = cached(kube_api)
    kube_api.store.create("pods", pod("a"))
    cluster.pods()
    kube_api.store.delete("pods", "default", "a")
    created = kube_api.store.create("pods", pod("b"))
    kube_api.store.compact()
    assert cluster.cache is not None
    cluster.cache.expect(rv(created))
    # When the wake-up's read catches up / Then the watch's 410 leads to a list, which has both changes
    assert keys(cluster) == ["default/b"]
    assert lists(kube_api, "pods") == 2
    assert sum(cluster.cache.stats.relists.values()) == 1


def test_a_broken_stream_resumes_from_the_last_event(kube_api: KubeApiServer) -> None:
    # Given a warm cache and a watch connection that will drop mid-event once
    cluster = cached(kube_api)
    cluster.pods()
    kube_api.inject_error("/api/v1/pods", 0, 1, query_substring="watch=1")
    created = kube_api.store.create("pods", pod("a"))
    assert cluster.cache is not None
    cluster.cache.expect(rv(created))
    # When it is read / Then the cache watched again from where it was and did not list
    assert keys(cluster) == ["default/a"]
    # (the emulator records a watch only once it is served: the dropped one is a bare GET here)
    assert kube_api.requests()["GET pods"] == 3 and len(kube_api.store.watches) == 1
    assert cluster.cache.stats.lists["/api/v1/pods"] == 1 and cluster.cache.stats.watches == 2


@pytest.mark.parametrize(("case", "marker"), [
    ("a version the watch does not reach within the cap", "999999"),
    ("a version that is not an integer", "abc"),
])
def test_a_marker_the_watch_cannot_confirm_lists(kube_api: KubeApiServer, case: str, marker: str) -> None:
    # Given a warm cache with a 0.3 s cap
    cluster = cached(kube_api, cap_seconds=0.3)
    cluster.pods()
    kube_api.store.create("pods", pod("a"))
    assert cluster.cache is not None
    # When a wake-up names a version the cache cannot confirm
    cluster.cache.expect(marker)
    # Then the read lists (the pod is there) and the reason is counted once
    assert keys(cluster) == ["default/a"], case
    assert lists(kube_api, "pods") == 2
    assert sum(cluster.cache.stats.relists.values()) == 1


def test_a_clock_that_does_not_move_cannot_keep_a_catch_up_going(kube_api: KubeApiServer) -> None:
    # Given a warm cache on a clock that never advances (a simulation's), and a marker the watch never reaches
    cluster = KubeCluster(client_for(kube_api.url))
    cluster.cache = ClusterCache(cluster, clock=ManualClock(), settings=CacheSettings(cap_seconds=0.1))
    cluster.pods()
    cluster.cache.expect("999999")
    # When it is read / Then a bounded number of watch requests later it lists instead
    assert keys(cluster) == []
    assert lists(kube_api, "pods") == 2 and cluster.cache.stats.watches <= 8


class ShiftedClock(SystemClock):
    """Real time plus ``shift`` seconds of wall clock: a test can be "six minutes later" without waiting."""

    shift: float = 0.0

    def now(self) -> float:
        return super().now() + self.shift


class TickingClock(SystemClock):
    """Its monotonic reading moves a second per look: any catch-up cap runs out after an event or two."""

    ticks: float = 0.0

    def monotonic(self) -> float:
        self.ticks += 1.0
        return super().monotonic() + self.ticks


def warm(kube_api: KubeApiServer, clock: SystemClock, **settings: float) -> KubeCluster:
    """A cache that has listed pods and nodes once (a cold container's first pass)."""
    cluster = KubeCluster(client_for(kube_api.url), page_size=2)
    cluster.cache = ClusterCache(cluster, clock=clock, settings=CacheSettings(**{"quiet_seconds": 0.3, **settings}))
    cluster.cache.catch_up()
    cluster.pods()
    cluster.nodes()
    return cluster


def test_a_scheduled_catch_up_in_a_warm_cache_makes_no_list_and_sees_what_changed(kube_api: KubeApiServer) -> None:
    # Given a warm cache (its container's first pass listed both collections)
    kube_api.store.create("pods", pod("a"))
    cluster = warm(kube_api, ShiftedClock())
    assert cluster.cache is not None
    assert (lists(kube_api, "pods"), lists(kube_api, "nodes")) == (1, 1)
    # When a pod and a node are created between passes, and the next scheduled pass (no marker) reads
    kube_api.store.create("pods", pod("b"))
    kube_api.store.create("nodes", node("n1"))
    cluster.cache.catch_up()
    # Then it sees both without listing: one watch per collection, read until quiet
    assert keys(cluster) == ["default/a", "default/b"]
    assert [n.name for n in cluster.nodes()] == ["n1"]
    assert (lists(kube_api, "pods"), lists(kube_api, "nodes")) == (1, 1)
    assert cluster.cache.rule == "catch-up" and cluster.cache.stats.watches == 2


@pytest.mark.parametrize(("case", "age", "listed"), [
    ("a last list younger than the resync period", 299.0, False),
    ("a last list as old as the resync period", 300.0, True),
    ("a clock that went back before the last list", -60.0, True),
])
def test_a_catch_up_lists_once_the_resync_period_has_passed(kube_api: KubeApiServer, case: str, age: float,
                                                              listed: bool) -> None:
    # Given a warm cache with the product's 5-minute resync period
    clock = ShiftedClock()
    cluster = warm(kube_api, clock)
    assert cluster.cache is not None and cluster.cache.settings.resync_seconds == 300.0
    kube_api.store.create("pods", pod("a"))
    # When a scheduled pass runs that long after the last list
    clock.shift = age
    cluster.cache.catch_up()
    # Then it lists both collections exactly when the period has passed (and sees the pod either way)
    assert keys(cluster) == ["default/a"], case
    cluster.nodes()
    assert (lists(kube_api, "pods"), lists(kube_api, "nodes")) == ((2, 2) if listed else (1, 1)), case


def test_a_catch_up_that_hits_410_gone_lists(kube_api: KubeApiServer) -> None:
    # Given a warm cache whose resourceVersion the API server has since compacted away
    cluster = warm(kube_api, ShiftedClock())
    assert cluster.cache is not None
    kube_api.store.create("pods", pod("a"))
    kube_api.store.compact()
    # When the next scheduled pass catches up / Then the watch's 410 leads to a list, which has the pod
    cluster.cache.catch_up()
    assert keys(cluster) == ["default/a"]
    assert lists(kube_api, "pods") == 2 and sum(cluster.cache.stats.relists.values()) == 1


def test_a_catch_up_not_quiet_within_its_cap_lists(kube_api: KubeApiServer) -> None:
    # Given a warm cache, two pods created since its last read, and a cap that runs out after one event
    cluster = warm(kube_api, TickingClock(), cap_seconds=1.5)
    assert cluster.cache is not None
    kube_api.store.create("pods", pod("a"))
    kube_api.store.create("pods", pod("b"))
    # When a scheduled pass catches up
    cluster.cache.catch_up()
    # Then it cannot tell its backlog from changes still arriving, and lists instead (both pods are there)
    assert keys(cluster) == ["default/a", "default/b"]
    assert lists(kube_api, "pods") == 2
    assert [r for r in cluster.cache.stats.relists if "not quiet within 1.5 s" in r]
    # And a later read of the same pass is not held to the cap: it keeps what its watch delivered, no list
    cluster.pods()
    assert lists(kube_api, "pods") == 2


def test_a_resync_list_keeps_the_objects_whose_version_is_unchanged(kube_api: KubeApiServer) -> None:
    # Given a warm cache holding two pods and a node
    st = kube_api.store
    st.create("pods", pod("a"))
    st.create("pods", pod("b"))
    st.create("nodes", node("n1"))
    clock = ShiftedClock()
    cluster = warm(kube_api, clock)
    assert cluster.cache is not None
    before = {p.name: p for p in cluster.pods()}
    (n1,) = cluster.nodes()
    # When one pod is bound, a pod is added, and the next pass runs after the resync period (it lists)
    st.bind("default", "b", "n1")
    st.create("pods", pod("c"))
    clock.shift = 301.0
    cluster.cache.catch_up()
    after = {p.name: p for p in cluster.pods()}
    (n1_again,) = cluster.nodes()
    assert (lists(kube_api, "pods"), lists(kube_api, "nodes")) == (3, 2)  # one page of pods, then two
    # Then the unchanged pod and node are the objects already held (not parsed again), the changed and new
    # ones are parsed from the list
    assert after["a"] is before["a"] and n1_again is n1
    assert after["b"] is not before["b"] and after["b"].node_name == "n1"
    assert sorted(after) == ["a", "b", "c"]
    # And a later catch-up still applies changes to them (the versions were kept with the objects)
    st.delete("pods", "default", "a")
    assert keys(cluster) == ["default/b", "default/c"]
