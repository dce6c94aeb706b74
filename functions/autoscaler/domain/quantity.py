"""Kubernetes resource quantities ("100m", "1.5", "2Gi", "1e3") converted to integers.

CPU is kept in millicores and everything else in base units (bytes, counts), so arithmetic in the
scheduler is on plain ints and never loses precision to floats.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Return the exact value of a Kubernetes quantity string (or number)."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = str(value).strip()
    if not text:
        raise QuantityError("empty quantity")
    number, factor = text, Decimal(1)
    if text[-2:] in _BINARY:
        number, factor = text[:-2], Decimal(_BINARY[text[-2:]])
    elif text[-1] in _DECIMAL and text[-1] not in "0123456789" and not _is_exponent(text):
        number, factor = text[:-1], _DECIMAL[text[-1]]
    try:
        result = Decimal(number) * factor
    except InvalidOperation as exc:
        raise QuantityError(f"not a quantity: {value!r}") from exc
    if not result.is_finite():
        raise QuantityError(f"not a quantity: {value!r}")
    return result


def _is_exponent(text: str) -> bool:
    # "1E3" or "1e3" is a decimal exponent, "1E" is exa; only digits may follow the e.
    lowered = text.lower()
    idx = lowered.rfind("e")
    return 0 < idx < len(text) - 1 and lowered[idx + 1 :].lstrip("+-").isdigit()


def cpu_millis(value: str | int | float) -> int:
    """CPU quantity in millicores, rounded up as the API server does ("1.0001" -> 1001)."""
    if isinstance(value, str):
        return _cpu_millis_text(value)
    millis = parse_quantity(value) * 1000
    return int(millis.to_integral_value(rounding="ROUND_CEILING"))


def to_int(value: str | int | float) -> int:
    """Any non-CPU quantity (bytes, counts) as an integer, rounded up."""
    if isinstance(value, str):
        return _to_int_text(value)
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


# Quantity strings repeat across a cluster's 50,000 pods ("250m", "256Mi"): parse each once.
# Only strings are cached, since True == 1 would otherwise share a cache entry with 1.
@lru_cache(maxsize=4096)
def _cpu_millis_text(value: str) -> int:
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


@lru_cache(maxsize=4096)
def _to_int_text(value: str) -> int:
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def format_cpu(millis: int) -> str:
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def format_bytes(size: int) -> str:
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size % factor == 0 and size >= factor:
            return f"{size // factor}{suffix}"
    return str(size)
