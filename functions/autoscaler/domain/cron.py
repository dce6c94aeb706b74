"""The 5-field cron syntax Karpenter's disruption budgets use (``minute hour day-of-month month
day-of-week``, UTC), and the one question budgets ask of it: is a ``schedule`` + ``duration`` window
open at a given moment?

Supported: ``*``, numbers, ranges ``a-b``, steps ``*/n`` and ``a-b/n``, lists ``a,b``, month and
weekday names (``jan``, ``mon``), weekday 7 as Sunday, and the macros ``@yearly``/``@annually``,
``@monthly``, ``@weekly``, ``@daily``/``@midnight``, ``@hourly``. As in cron, when both day fields are
restricted a day matches either of them. A small parser is enough here and keeps the Lambda free of
a dependency for five fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
_MONTHS = {n: i for i, n in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                        "nov", "dec"), start=1)}
_DAYS = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day-of-month", 1, 31, {}), ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _DAYS))
# Windows longer than this are not scanned minute by minute; a budget window beyond a month is a mistake.
MAX_WINDOW_SECONDS = 31 * 24 * 3600


class CronError(ValueError):
    """A schedule that is not valid 5-field cron; the message names the field."""


def _value(text: str, *, name: str, lo: int, hi: int, names: dict[str, int]) -> int:
    key = text.lower()
    if key in names:
        return names[key]
    if not text.isdigit():
        raise CronError(f"{name} field: {text!r} is not a number{' or name' if names else ''}")
    value = int(text)
    if not lo <= value <= hi:
        raise CronError(f"{name} field: {value} is outside {lo}-{hi}")
    return value


def _field(text: str, *, name: str, lo: int, hi: int, names: dict[str, int]) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{name} field: step {step_text!r} must be a positive number")
            step = int(step_text)
        if body == "*":
            start, end = lo, hi
        elif "-" in body:
            a, _, b = body.partition("-")
            start = _value(a, name=name, lo=lo, hi=hi, names=names)
            end = _value(b, name=name, lo=lo, hi=hi, names=names)
            if start > end:
                raise CronError(f"{name} field: range {body!r} runs backwards")
        else:
            start = _value(body, name=name, lo=lo, hi=hi, names=names)
            end = hi if step_text else start
        out.update(range(start, end + 1, step))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_restricted: bool
    weekdays_restricted: bool

    def matches(self, epoch: float) -> bool:
        """Whether the schedule fires in the minute holding ``epoch`` (UTC)."""
        t = datetime.fromtimestamp(epoch, tz=UTC)
        if t.minute not in self.minutes or t.hour not in self.hours or t.month not in self.months:
            return False
        day_ok = t.day in self.days
        weekday_ok = (t.weekday() + 1) % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return day_ok or weekday_ok
        return day_ok and weekday_ok


def parse_cron(expression: str) -> CronSchedule:
    """Parse a 5-field cron expression or macro; raises CronError naming the bad field."""
    text = _MACROS.get(expression.strip().lower(), expression.strip())
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"{expression!r} must have 5 fields (minute hour day-of-month month day-of-week) "
                        f"or be one of {', '.join(sorted(_MACROS))}")
    sets = [_field(p, name=n, lo=lo, hi=hi, names=names) for p, (n, lo, hi, names) in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[4])
    return CronSchedule(sets[0], sets[1], sets[2], sets[3], weekdays,
                        days_restricted=parts[2] != "*", weekdays_restricted=parts[4] != "*")


def window_open(schedule: str | CronSchedule, duration: float, now: float) -> bool:
    """True when the schedule fired within the last ``duration`` seconds (the window it opened is
    still open at ``now``)."""
    cron = parse_cron(schedule) if isinstance(schedule, str) else schedule
    span = min(duration, MAX_WINDOW_SECONDS)
    minute = int(now // 60) * 60
    while now - minute < span:
        if cron.matches(minute):
            return True
        minute -= 60
    return False
