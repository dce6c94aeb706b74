"""Resource vectors: a node's or a pod's resources as integers on the plan's resource keys (cpu, memory,
pods first, then any other the pending pods request), and the arithmetic the planner does on them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Vec = tuple[int, ...]

# "No bound": pods of a class per node, or requests fitting, when nothing limits them.
UNBOUNDED = 1 << 30


def vector(keys: Sequence[str], resources: Mapping[str, int]) -> Vec:
    """``resources`` on ``keys`` (absent keys are 0)."""
    return tuple(resources.get(key, 0) for key in keys)


def fit_count(free: Sequence[int], request: Sequence[int]) -> int:
    """How many requests of ``request`` fit in ``free``."""
    # Plain loops and comparisons: the planner calls these ~10^5-10^6 times in a 50k-pod pass.
    count = UNBOUNDED
    for have, need in zip(free, request, strict=True):
        if need > 0:
            quotient = have // need
            if quotient < count:  # noqa: PLR1730 (min() is a call per element on the hot path)
                count = quotient
    return count if count > 0 else 0


def plus(base: Sequence[int], extra: Sequence[int], times: int = 1) -> Vec:
    """``base`` plus ``times`` times ``extra``."""
    return tuple(have + more * times for have, more in zip(base, extra, strict=True))


def minus(base: Sequence[int], taken: Sequence[int]) -> Vec:
    return tuple(have - less for have, less in zip(base, taken, strict=True))


def fits_within(need: Sequence[int], room: Sequence[int]) -> bool:
    """Every component of ``need`` is at most that of ``room``."""
    for wanted, have in zip(need, room, strict=True):  # noqa: SIM110 (all() over a generator is ~2x slower here)
        if wanted > have:
            return False
    return True
