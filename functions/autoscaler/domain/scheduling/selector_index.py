"""Which pods and pod classes a label selector (or a pod affinity term) selects: ``selects`` answers for one
candidate, ``SelectorIndex`` for every class of a plan at once.

A plan asks the same few selectors about every class over and over (each class's spread constraints and
affinity terms, against every other class). Asked class by class, that is classes x classes calls: at 20,000
pods in services of 12 (1,700 classes) it was most of a plan's CPU and grew with the square of the pods. The
index answers each distinct selector once, from the classes that carry one of its labels, and keeps the
answer for the classes split off later."""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

from autoscaler.domain.models import ALL_NAMESPACES, LabelSelector, Pod, PodAffinityTerm

if TYPE_CHECKING:
    from autoscaler.domain.scheduling.pod_class import PodClass

Selector = PodAffinityTerm | LabelSelector | None


def selects(term: Selector, *, owner_namespace: str, candidate: Pod | PodClass,
            namespaces: tuple[str, ...] = ()) -> bool:
    """Whether an affinity term (or a spread constraint's selector) of a pod in ``owner_namespace``
    selects ``candidate``: a pod, or the pods of a class."""
    sample = candidate if isinstance(candidate, Pod) else candidate.sample
    if isinstance(term, PodAffinityTerm):
        namespaces, term = term.namespaces, term.label_selector
    allowed = namespaces or (owner_namespace,)
    if sample.namespace not in allowed and ALL_NAMESPACES not in allowed:
        return False
    return term is not None and term.matches(sample.labels)


class SelectorIndex:
    """The classes of one plan a selector selects, in class order (a class's id is its position in
    ``classes``, the planner's list, which only grows: a class split off is appended with the next id)."""

    def __init__(self, classes: list[PodClass]) -> None:
        self.classes = classes  # shared, not copied: classes appended later are indexed at the next question
        self.by_label: dict[tuple[str, str], list[PodClass]] = {}  # (key, value) -> classes whose sample has it
        self.indexed = 0  # classes[:indexed] are in ``by_label``
        # (selector, owner namespace, namespaces) -> (classes[:count] answered, those selected)
        self.answers: dict[tuple[Selector, str, tuple[str, ...]], tuple[int, list[PodClass]]] = {}

    def selected(self, term: Selector, *, owner_namespace: str, namespaces: tuple[str, ...] = ()) -> list[PodClass]:
        """Every class ``selects(term, owner_namespace=..., candidate=cls, namespaces=...)`` holds for, in
        class order. The list is the index's own: read it, do not change it."""
        self._index_new()
        key = (term, owner_namespace, namespaces)
        known = self.answers.get(key)
        total = len(self.classes)
        if known is not None and known[0] == total:
            return known[1]
        start, found = known if known is not None else (0, [])
        found.extend(cls for cls in self._candidates(term, start)
                     if selects(term, owner_namespace=owner_namespace, candidate=cls, namespaces=namespaces))
        self.answers[key] = (total, found)
        return found

    def _index_new(self) -> None:
        for position in range(self.indexed, len(self.classes)):
            cls = self.classes[position]
            if cls.id != position:  # ``_candidates`` finds a class's place by its id
                raise ValueError(f"class {cls.id} stands at position {position} of the plan's classes")
            for pair in cls.sample.labels.items():
                self.by_label.setdefault(pair, []).append(cls)
        self.indexed = len(self.classes)

    def _candidates(self, term: Selector, start: int) -> list[PodClass]:
        """The classes from id ``start`` on that may match: those carrying one of the labels the selector
        requires (the rarest), or every class when it requires none."""
        selector = term.label_selector if isinstance(term, PodAffinityTerm) else term
        if selector is None:
            return []
        if selector.match_labels:
            pool = min((self.by_label.get(pair, []) for pair in selector.match_labels), key=len)
        else:
            required = next((expression for expression in selector.match_expressions
                             if expression.operator == "In"), None)
            if required is None:
                return self.classes[start:]
            pool = sorted((cls for value in set(required.values)
                           for cls in self.by_label.get((required.key, value), ())), key=lambda cls: cls.id)
        return pool[bisect_left(pool, start, key=lambda cls: cls.id):]
