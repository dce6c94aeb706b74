"""The planner's indexes answer exactly what the walks they replace answered: ``SelectorIndex`` what
``selects`` says of every class, ``ChunkShelf`` the next chunk a fill walk could take, ``ClassQueue`` the
least queued request, ``OpenedNodes.keep_useful`` the nodes a full filter keeps. And the selector work of
building classes grows with the classes, not with their square."""

from __future__ import annotations

import random

import pytest

from autoscaler.domain.keys import HOSTNAME_LABEL, ZONE_LABEL
from autoscaler.domain.models import LabelSelector, Pod, PodAffinityTerm, Requirement
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling import selector_index
from autoscaler.domain.scheduling.class_queue import ClassQueue
from autoscaler.domain.scheduling.new_node import NewNode
from autoscaler.domain.scheduling.opened_nodes import ChunkShelf, OpenedNodes
from autoscaler.domain.scheduling.pod_class import PodChunk, PodClass, build_classes
from autoscaler.domain.scheduling.pool_type import PoolType
from autoscaler.domain.scheduling.selector_index import SelectorIndex, selects

KEYS = ("cpu", "memory", "pods")


def _class(number: int, labels: dict[str, str], *, namespace: str = "default",
           request: tuple[int, ...] = (100, 100, 1)) -> PodClass:
    pod = Pod(namespace=namespace, name=f"pod-{number}", labels=labels)
    return PodClass(id=number, sample=pod, pods=[pod], request=request, variants=[()])


def _random_classes(rng: random.Random, count: int, start: int = 0) -> list[PodClass]:
    out = []
    for number in range(start, start + count):
        labels = {key: rng.choice("abc") for key in ("app", "tier", "team") if rng.random() < 0.7}
        out.append(_class(number, labels, namespace=rng.choice(("default", "other"))))
    return out


def _selectors() -> list[PodAffinityTerm | LabelSelector | None]:
    return [
        None,
        LabelSelector(),
        LabelSelector(match_labels=(("app", "a"),)),
        LabelSelector(match_labels=(("app", "b"), ("tier", "c"))),
        LabelSelector(match_labels=(("app", "zzz"),)),
        LabelSelector(match_expressions=(Requirement("tier", "In", ("a", "b")),)),
        LabelSelector(match_expressions=(Requirement("team", "NotIn", ("a",)),)),
        LabelSelector(match_expressions=(Requirement("team", "Exists"),)),
        LabelSelector(match_expressions=(Requirement("app", "DoesNotExist"), Requirement("tier", "In", ("c",)))),
        PodAffinityTerm(LabelSelector(match_labels=(("app", "a"),)), HOSTNAME_LABEL),
        PodAffinityTerm(LabelSelector(match_labels=(("team", "b"),)), ZONE_LABEL, namespaces=("other",)),
        PodAffinityTerm(LabelSelector(match_labels=(("team", "b"),)), ZONE_LABEL, namespaces=("*",)),
        PodAffinityTerm(None, ZONE_LABEL),
    ]


def test_selector_index_answers_as_selects_does_for_every_class_also_after_classes_are_appended() -> None:
    rng = random.Random(7)
    classes = _random_classes(rng, 120)
    index = SelectorIndex(classes)
    for round_number in range(3):
        for selector in _selectors():
            for owner in ("default", "other"):
                for namespaces in ((), ("other",)):
                    expected = [cls for cls in classes if selects(selector, owner_namespace=owner, candidate=cls,
                                                                  namespaces=namespaces)]
                    got = index.selected(selector, owner_namespace=owner, namespaces=namespaces)
                    assert got == expected, (round_number, selector, owner, namespaces)
        classes.extend(_random_classes(rng, 40, start=len(classes)))  # split-off classes join the plan's list


def test_selector_index_refuses_a_class_out_of_its_place() -> None:
    classes = [_class(0, {"app": "a"}), _class(5, {"app": "a"})]
    with pytest.raises(ValueError, match="class 5 stands at position 1"):
        SelectorIndex(classes).selected(LabelSelector(match_labels=(("app", "a"),)), owner_namespace="default")


def test_building_classes_asks_selectors_in_proportion_to_the_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Services of 12 replicas with hostname anti-affinity and hostname spread on their own label: each
    selector selects one class, so the selects() calls must grow linearly (a walk over every pair of
    classes made it quadratic: 1,700 classes at 20,000 pods took most of a plan's CPU)."""
    calls = 0
    real = selector_index.selects

    def counting(*args: object, **kwargs: object) -> bool:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(selector_index, "selects", counting)

    def build(services: int) -> int:
        nonlocal calls
        calls = 0
        pods = []
        for service in range(services):
            selector = LabelSelector(match_labels=(("app", f"svc-{service}"),))
            for replica in range(12):
                pods.append(Pod(namespace="default", name=f"svc-{service}-{replica}",
                                labels={"app": f"svc-{service}"}, requests={"cpu": 100 + service % 5},
                                pod_anti_affinity=(PodAffinityTerm(selector, HOSTNAME_LABEL),)))
        build_classes(pods, PlanInput(node_pools=[], node_classes={}, pods=pods), KEYS)
        return calls

    small, large = build(50), build(400)
    assert small > 0
    assert large <= 8 * small * 1.2  # eight times the classes: about eight times the calls, not 64


def _chunks(rng: random.Random, count: int) -> list[PodChunk]:
    return [PodChunk(_class(number, {}, request=(rng.choice((100, 250, 500, 1000)), rng.choice((128, 512, 2048)), 1)),
                     rng.choice((None, frozenset({"a"}), frozenset({"b"}), frozenset({"a", "c"}))), None,
                     rng.choice((0, 1, 3))) for number in range(count)]


def test_chunk_shelf_finds_the_chunk_a_walk_over_every_chunk_would_reach() -> None:
    rng = random.Random(3)
    chunks = _chunks(rng, 150)
    shelf = ChunkShelf(chunks, 0, 1)

    def fits(position: int, cpu: int, memory: int, zones: frozenset[str]) -> bool:
        chunk = chunks[position]
        return (bool(chunk.left) and chunk.cls.request[0] <= cpu and chunk.cls.request[1] <= memory
                and (chunk.zones is None or bool(chunk.zones & zones)))

    for _ in range(400):
        low, high = sorted(rng.sample(range(len(chunks)), 2))
        cpu, memory = rng.choice((50, 100, 300, 2000)), rng.choice((100, 600, 4096))
        zones = rng.choice((frozenset({"a"}), frozenset({"b"}), frozenset({"c"}), frozenset({"a", "b", "c"})))
        forward = next((position for position in range(low, high + 1) if fits(position, cpu, memory, zones)),
                       high + 1)
        backward = next((position for position in range(high, low - 1, -1) if fits(position, cpu, memory, zones)),
                        low - 1)
        assert shelf.next_fit(low, high, cpu, memory, zones) == forward
        assert shelf.previous_fit(high, low, cpu, memory, zones) == backward
        emptied = rng.randrange(len(chunks))
        if chunks[emptied].left:
            chunks[emptied].left = 0
            shelf.emptied(emptied)
    assert shelf.remaining == sum(1 for chunk in chunks if chunk.left)


def test_class_queue_floor_is_the_least_request_queued() -> None:
    rng = random.Random(5)
    made = [_class(number, {}, request=(rng.randrange(1, 9), rng.randrange(1, 9), 1)) for number in range(60)]
    queue = ClassQueue(made[:40])
    mirror = list(made[:40])
    spare = made[40:]
    while mirror:
        assert queue.floor() == tuple(min(cls.request[index] for cls in mirror) for index in range(3))
        assert len(queue) == len(mirror) and queue.head() is mirror[0]
        if spare and rng.random() < 0.3:
            added = [spare.pop(), spare.pop()] if len(spare) > 1 else [spare.pop()]
            queue.extendleft(reversed(added))
            mirror[:0] = added
        else:
            assert queue.popleft() is mirror.pop(0)
    assert not queue


def test_keep_useful_keeps_the_nodes_a_full_filter_keeps() -> None:
    rng = random.Random(11)
    pool_type = PoolType(name="m5.large", labels={}, allocatable=(2000, 8000, 30), capacity={}, offerings={})
    opened = OpenedNodes(KEYS)
    nodes: list[NewNode] = []
    kept: list[NewNode] = []
    classes = [_class(number, {}, request=(rng.choice((100, 400, 900)), rng.choice((200, 1500)), 1))
               for number in range(20)]
    for _ in range(300):
        if rng.random() < 0.2 or not kept:
            node = NewNode(target=None, pool_type=pool_type, labels={}, taints=(),  # type: ignore[arg-type]
                           limit=pool_type.allocatable, used=(0, 0, 0), zones=frozenset({"a"}),
                           capacity_types=frozenset({"spot"}))
            opened.open.append(node)
            opened.every.append(node)
            opened.changed.append(node)
            nodes.append(node)
            kept.append(node)
        cls = rng.choice(classes)
        node = rng.choice(kept)
        if all(free >= need for free, need in zip(node.free, cls.request, strict=True)):
            opened.put(node, cls, 1)
        floor = (rng.choice((50, 100, 400, 900)), rng.choice((100, 200, 1500)), 1)
        opened.keep_useful(floor)
        kept = [node for node in kept if all(free >= need for free, need in zip(node.free, floor, strict=True))]
        assert opened.open == kept
