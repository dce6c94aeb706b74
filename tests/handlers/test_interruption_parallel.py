"""Parallel drains and the handler's deadline (issue 18 items 1 and 2), through the real handler against
moto and the Kubernetes API emulator with graceful pod deletion (pods stay terminating until a kubelet
stand-in removes them)."""

from __future__ import annotations

import threading
import time

from tests.handlers.interruption_world import World, event_for


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
    seen = _kubelet_when_all_evicted(world, 10, fallback=3.0)
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
    # 12 s left less the 10 s safety margin: 2 s of draining.
    response = world.run(event_for("health-scheduled-change", *ids), message_ids=["health"], remaining_ms=12_000)
    elapsed = time.monotonic() - started
    assert response == {"batchItemFailures": [{"itemIdentifier": "health"}]}  # comes back for the rest
    assert len(world.evictions()) == 10  # one pool's worth; sequential drains sent one pass to all 40
    assert elapsed < 12.0  # never past the invocation's end
    assert all(world.node(f"h{i:02d}")["spec"].get("unschedulable") for i in range(40))  # type: ignore[index]
