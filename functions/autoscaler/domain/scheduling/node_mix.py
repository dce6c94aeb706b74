"""Sizing a group's nodes: the price/size frontier of instance types, the small LP that covers a group's
demand with one type or a pair of types (and its shadow prices), and filling one node balancing CPU
against memory."""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.domain.scheduling.pod_class import PodClass
from autoscaler.domain.scheduling.pool_type import INFINITE_PRICE, PoolType
from autoscaler.domain.scheduling.vector import Vec, fit_count, fits_within

Demand = list[tuple[PodClass, int]]  # classes and how many of their pods


def frontier(priced: list[tuple[float, PoolType]]) -> list[tuple[float, PoolType]]:
    """The priced types no other type beats (at most as dear while holding at least as much of every
    resource), cheapest first."""
    cheapest: dict[Vec, tuple[float, PoolType]] = {}  # many families share a size; keep the cheapest
    for price, pool_type in priced:
        seen = cheapest.get(pool_type.allocatable)
        if price < INFINITE_PRICE and (seen is None or (price, pool_type.name) < (seen[0], seen[1].name)):
            cheapest[pool_type.allocatable] = (price, pool_type)
    out: list[tuple[float, PoolType]] = []
    for price, pool_type in sorted(cheapest.values(), key=lambda entry: (entry[0], entry[1].name)):
        # every earlier one is at most as dear
        if not any(fits_within(pool_type.allocatable, kept.allocatable) for _, kept in out):
            out.append((price, pool_type))
    return out


def mix(types: list[PoolType], items: Demand, demand: list[int], *, zones: frozenset[str],
        capacity_types: frozenset[str], keys: Sequence[str]) -> tuple[PoolType | None, float, PoolType | None, float]:
    """The cheapest fractional cover of ``demand`` by one type or a pair of types (the LP over CPU,
    memory and pods, restricted to two types, which is where its optimum lies for two binding
    resources): (first type, nodes of it, second type or None, nodes of it)."""
    biggest = tuple(max(cls.request[index] for cls, _ in items) for index in range(len(keys)))
    fitting = [pool_type for pool_type in types if fits_within(biggest, pool_type.allocatable)] or types
    priced = [(pool_type, price) for pool_type in fitting
              if (price := pool_type.sizing_price(zones, capacity_types)) < INFINITE_PRICE]
    if not priced:
        return None, 0.0, None, 0.0
    dims = [index for index, amount in enumerate(demand) if amount > 0]

    def single(pool_type: PoolType) -> float:
        return max((demand[index] / pool_type.allocatable[index] if pool_type.allocatable[index] > 0
                    else INFINITE_PRICE) for index in dims)

    best_single = min(priced, key=lambda entry: entry[1] * single(entry[0]))
    best_cost = best_single[1] * single(best_single[0])
    best: tuple[PoolType, float, PoolType | None, float] = (best_single[0], single(best_single[0]), None, 0.0)
    candidates: dict[str, tuple[PoolType, float]] = {}
    for index in dims:
        for pool_type, price in sorted(priced, key=lambda entry: entry[1] / entry[0].allocatable[index]
                                       if entry[0].allocatable[index] else INFINITE_PRICE)[:6]:
            candidates[pool_type.name] = (pool_type, price)
    for pool_type, price in sorted(priced, key=lambda entry: entry[1] * single(entry[0]))[:8]:
        candidates[pool_type.name] = (pool_type, price)  # balanced types pair well too
    pairs = list(candidates.values())
    for position, (first, first_price) in enumerate(pairs):
        first_room = first.allocatable
        for second, second_price in pairs[position + 1:]:
            second_room = second.allocatable
            for offset, row in enumerate(dims):
                for column in dims[offset + 1:]:
                    determinant = first_room[row] * second_room[column] - first_room[column] * second_room[row]
                    if determinant == 0:
                        continue
                    first_count = (demand[row] * second_room[column] - demand[column] * second_room[row]) / determinant
                    second_count = (first_room[row] * demand[column] - first_room[column] * demand[row]) / determinant
                    if first_count < 0 or second_count < 0:
                        continue
                    if any(first_room[index] * first_count + second_room[index] * second_count
                           < demand[index] * (1 - 1e-9) for index in dims):
                        continue
                    cost = first_price * first_count + second_price * second_count
                    if cost < best_cost * 0.995:
                        best_cost, best = cost, (first, first_count, second, second_count)
    return best


def duals(types: list[PoolType], items: Demand, demand: list[int], *, zones: frozenset[str],
          capacity_types: frozenset[str], keys: Sequence[str]) -> tuple[float, ...]:
    """Shadow prices per unit of each resource of the cheapest fractional cover of ``demand`` (the
    dual of ``mix``'s LP): what one more unit costs when packed in bulk. Zero where not binding."""
    if not types or not any(demand):
        return (0.0,) * len(keys)
    first, _, second, _ = mix(types, items, demand, zones=zones, capacity_types=capacity_types, keys=keys)
    return mix_duals(first, second, demand, zones=zones, capacity_types=capacity_types, keys=keys)


def mix_duals(first: PoolType | None, second: PoolType | None, demand: list[int], *, zones: frozenset[str],
              capacity_types: frozenset[str], keys: Sequence[str]) -> tuple[float, ...]:
    """``duals`` for the types ``mix`` chose for ``demand``."""
    prices = [0.0] * len(keys)
    if first is None:
        return tuple(prices)
    first_price = first.sizing_price(zones, capacity_types)
    first_room = first.allocatable
    dims = [index for index, amount in enumerate(demand) if amount > 0]
    if second is None:
        binding = max(dims, key=lambda index: demand[index] / first_room[index] if first_room[index] > 0
                      else INFINITE_PRICE)
        if first_room[binding] > 0:
            prices[binding] = first_price / first_room[binding]
        return tuple(prices)
    second_price = second.sizing_price(zones, capacity_types)
    second_room = second.allocatable
    best = -1.0
    for offset, row in enumerate(dims):
        for column in dims[offset + 1:]:
            determinant = first_room[row] * second_room[column] - first_room[column] * second_room[row]
            if determinant == 0:
                continue
            row_price = (first_price * second_room[column] - second_price * first_room[column]) / determinant
            column_price = (first_room[row] * second_price - second_room[row] * first_price) / determinant
            value = row_price * demand[row] + column_price * demand[column]
            if row_price >= 0 and column_price >= 0 and value > best:
                best, prices = value, [0.0] * len(keys)
                prices[row], prices[column] = row_price, column_price
    return tuple(prices)


def fill_balanced(pool_type: PoolType, items: Demand, *, cpu: int, memory: int) -> tuple[dict[int, int], Vec]:
    """Fill one node of ``pool_type`` from ``items``, taking from the CPU-heavy end when memory is the
    fuller dimension and from the memory-heavy end otherwise, in chunks, until nothing more fits.
    Returns pods per class id and the resources they use."""
    room = pool_type.allocatable
    cpu_room, memory_room = max(room[cpu], 1), max(room[memory], 1)
    order = sorted((cls for cls, _ in items), key=lambda cls: (
        (cls.request[memory] / memory_room) / max(cls.request[cpu] / cpu_room, 1e-12), cls.id))
    left = {cls.id: count for cls, count in items}
    free = list(room)
    put: dict[int, int] = {}
    low, high = 0, len(order) - 1
    while low <= high:
        cpu_full = 1 - free[cpu] / cpu_room
        memory_full = 1 - free[memory] / memory_room
        cls = order[low] if cpu_full <= memory_full else order[high]
        taken = min(left[cls.id], fit_count(free, cls.request))
        if taken <= 0:
            if cls is order[low]:
                low += 1
            else:
                high -= 1
            continue
        taken = min(taken, max(1, fit_count(room, cls.request) // 16))
        put[cls.id] = put.get(cls.id, 0) + taken
        left[cls.id] -= taken
        free = [have - need * taken for have, need in zip(free, cls.request, strict=True)]
        if left[cls.id] == 0:
            if cls is order[low]:
                low += 1
            else:
                high -= 1
    return put, tuple(total - have for total, have in zip(room, free, strict=True))
