"""The classes still to place, in placement order, and the least request among them (what an opened node
needs room for to stay useful)."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable

from autoscaler.domain.scheduling.pod_class import PodClass
from autoscaler.domain.scheduling.vector import Vec


class ClassQueue:
    """A queue of classes taken from the front; classes made while placing (children of a split, pods that
    gave up a preference) go back in at the front. It counts the distinct requests queued so that ``floor``
    looks at those (a few dozen), not at every queued class: asked every eighth class, a walk over the
    queue was classes x classes."""

    def __init__(self, classes: Iterable[PodClass]) -> None:
        self.classes = deque(classes)
        self.requests = Counter(cls.request for cls in self.classes)  # request -> classes queued with it

    def __bool__(self) -> bool:
        return bool(self.classes)

    def __len__(self) -> int:
        return len(self.classes)

    def head(self) -> PodClass:
        return self.classes[0]

    def popleft(self) -> PodClass:
        cls = self.classes.popleft()
        left = self.requests[cls.request] - 1
        if left:
            self.requests[cls.request] = left
        else:
            del self.requests[cls.request]
        return cls

    def extendleft(self, classes: Iterable[PodClass]) -> None:
        """Put ``classes`` at the front, the last one first (as ``deque.extendleft``)."""
        added = list(classes)
        self.classes.extendleft(added)
        self.requests.update(cls.request for cls in added)

    def floor(self) -> Vec:
        """The least request of a queued class on each resource (the queue is not empty)."""
        requests = list(self.requests)
        return tuple(min(request[index] for request in requests) for index in range(len(requests[0])))
