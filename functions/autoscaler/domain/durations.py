"""Go-style durations (``30s``, ``15m``, ``1h30m``, ``720h``), Karpenter's notation, parsed in one place
for NodePools and the cluster file alike."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")


def duration_seconds(text: str) -> int:
    """Seconds in a duration such as ``15m``, ``1h30m`` or ``30s``. Raises ValueError naming the text."""
    match = _DURATION.match(text.strip())
    if not text.strip() or not match:
        raise ValueError(f"{text!r} is not a duration like '30s', '15m' or '1h30m'")
    return int(match["h"] or 0) * 3600 + int(match["m"] or 0) * 60 + int(match["s"] or 0)


def optional_duration_seconds(value: str | int | None, *, field: str) -> int | None:
    """A NodePool duration: ``Never`` and None mean no limit; an int is seconds already. Raises ValueError
    naming ``field``."""
    if value is None or value == "Never":
        return None
    if isinstance(value, int):
        return value
    try:
        return duration_seconds(value)
    except ValueError:
        raise ValueError(f"{field}: {value!r} is not a duration like 30s, 5m, 720h or Never") from None
