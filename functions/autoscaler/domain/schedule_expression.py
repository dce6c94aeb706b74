"""EventBridge schedule expressions (``rate(...)`` and 6-field ``cron(...)``), checked against
EventBridge's own grammar so a bad schedule fails at validation, not at deploy.

Rules (EventBridge "Schedule expressions for rules"): ``rate(value unit)`` with a positive integer value
and unit ``minute(s)``, ``hour(s)`` or ``day(s)``, singular exactly when the value is 1;
``cron(minutes hours day-of-month month day-of-week year)`` with exactly one of the two day fields ``?``.
"""

from __future__ import annotations

import re

_RATE = re.compile(r"^rate\((?P<n>\d+) (?P<unit>[a-z]+)\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# name, low, high, names (value = index + low), extra characters allowed
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...], str], ...] = (
    ("minutes", 0, 59, (), ""),
    ("hours", 0, 23, (), ""),
    ("day-of-month", 1, 31, (), "?LW"),
    ("month", 1, 12, _MONTHS, ""),
    ("day-of-week", 1, 7, _DAYS, "?L#"),
    ("year", 1970, 2199, (), ""),
)
_EXAMPLE = "write 'rate(5 minutes)', 'rate(1 hour)' or 'cron(0 12 * * ? *)'"


def rate_seconds(expression: str) -> int | None:
    """Seconds between runs of a valid ``rate(...)`` expression; None for anything else."""
    match = _RATE.match(expression.strip())
    if not match or rate_problem(expression) is not None:
        return None
    return int(match["n"]) * _UNIT_SECONDS[match["unit"].rstrip("s")]


def rate_problem(expression: str) -> str | None:
    """What is wrong with a ``rate(...)`` expression, or None."""
    match = _RATE.match(expression.strip())
    if not match:
        return f"{expression!r} is not a rate expression; write 'rate(VALUE UNIT)', e.g. 'rate(5 minutes)'"
    value, unit = int(match["n"]), match["unit"]
    if unit.rstrip("s") not in _UNIT_SECONDS or unit not in ("minute", "minutes", "hour", "hours", "day", "days"):
        return f"{expression!r}: unit {unit!r} is not minute(s), hour(s) or day(s)"
    if value < 1:
        return f"{expression!r}: the value must be a positive integer; write 'rate(1 {unit.rstrip('s')})'"
    if value == 1 and unit.endswith("s"):
        return f"{expression!r}: EventBridge wants a singular unit for 1; write 'rate(1 {unit[:-1]})'"
    if value > 1 and not unit.endswith("s"):
        return f"{expression!r}: EventBridge wants a plural unit above 1; write 'rate({value} {unit}s)'"
    return None


def _number(token: str, *, low: int, high: int, names: tuple[str, ...]) -> int | None:
    if token.upper() in names:
        return names.index(token.upper()) + low
    if token.isdigit() and low <= int(token) <= high:
        return int(token)
    return None


def _cron_part_ok(part: str, *, index: int) -> bool:
    name, low, high, names, extra = _CRON_FIELDS[index]
    if part == "*" or (part == "?" and "?" in extra):
        return True
    if "L" in extra:
        if part == "L" or (name == "day-of-month" and (part == "LW" or re.fullmatch(r"L-\d{1,2}", part))):
            return True
        if name == "day-of-week" and part.endswith("L") and _number(part[:-1], low=low, high=high, names=names):
            return True
    if "W" in extra and part.endswith("W") and _number(part[:-1], low=low, high=high, names=names):
        return True
    if "#" in extra and "#" in part:
        day, _, nth = part.partition("#")
        return _number(day, low=low, high=high, names=names) is not None and nth in ("1", "2", "3", "4", "5")
    base, _, step = part.partition("/")
    if step and not (step.isdigit() and int(step) >= 1):
        return False
    if base == "*" and step:
        return True
    first, _, last = base.partition("-")
    if _number(first, low=low, high=high, names=names) is None:
        return False
    return not last or _number(last, low=low, high=high, names=names) is not None


def cron_problem(expression: str) -> str | None:
    """What is wrong with a ``cron(...)`` expression, or None."""
    text = expression.strip()
    if not (text.startswith("cron(") and text.endswith(")")):
        return f"{expression!r} is not a cron expression; {_EXAMPLE}"
    fields = text[5:-1].split()
    if len(fields) != 6:
        return (f"{expression!r}: EventBridge cron takes 6 fields (minutes hours day-of-month month day-of-week "
                f"year), not {len(fields)}; e.g. 'cron(0 12 * * ? *)'")
    for index, value in enumerate(fields):
        name, low, high, names, _ = _CRON_FIELDS[index]
        if not all(_cron_part_ok(part, index=index) for part in value.split(",")):
            span = f"{low}-{high}" + (f" or {names[0]}-{names[-1]}" if names else "")
            return f"{expression!r}: {name} field {value!r} is not valid; use {span}, '*', ranges, lists or steps"
    if (fields[2] == "?") == (fields[4] == "?"):
        return (f"{expression!r}: exactly one of day-of-month and day-of-week must be '?'; "
                f"e.g. 'cron({' '.join(fields[:2])} * {fields[3]} ? {fields[5]})'")
    return None


def schedule_problem(expression: str) -> str | None:
    """What is wrong with an EventBridge schedule expression (rate or cron), or None when it is valid."""
    text = expression.strip()
    if text.startswith("rate("):
        return rate_problem(text)
    if text.startswith("cron("):
        return cron_problem(text)
    return f"{expression!r} is not an EventBridge schedule expression; {_EXAMPLE}"
