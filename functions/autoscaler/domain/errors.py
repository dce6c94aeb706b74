"""Errors a user can hit in configuration, each naming the object and the field that is wrong.

``Problem`` is one finding of the strict validation (``file:line: object: field: what is wrong; what to
write instead``); ``ConfigError`` is what parsers raise. Both carry field paths so a file reader can add
line numbers.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import ValidationError

Path = tuple[str | int, ...]
Severity = Literal["error", "warning"]


def dotted(path: Iterable[str | int]) -> str:
    """``("spec", "requirements", 0, "key")`` -> ``spec.requirements[0].key``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``word`` is most likely a typo of, if any is close."""
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` did you mean 'x'?`` for the closest candidate, or the list of valid ones when none is close."""
    options = sorted(set(candidates))
    close = closest(word, options)
    if close:
        return f"did you mean {close!r}?"
    if len(options) <= 12:
        return "expected one of: " + ", ".join(options)
    return "see docs/configuration.md for the fields this object takes"


@dataclass(frozen=True)
class Problem:
    """One finding. ``path`` runs from the document root; ``path[field_from:]`` is the field inside
    ``subject`` (e.g. ``NodePool default``; empty for the file's own keys)."""

    message: str
    path: Path = ()
    subject: str = ""
    field_from: int = 0
    severity: Severity = "error"
    line: int | None = None

    @property
    def field(self) -> str:
        return dotted(self.path[self.field_from:])

    def under(self, root: Path, subject: str) -> Problem:
        """The same finding for an object found at ``root`` of a larger document."""
        return replace(self, path=root + self.path, field_from=len(root) + self.field_from,
                       subject=self.subject or subject)

    def render(self, source: str = "") -> str:
        where = f"{source}:{self.line}" if source and self.line else source
        parts = [p for p in (where, self.subject, self.field) if p]
        text = ": ".join([*parts, self.message])
        return text if self.severity == "error" else f"{text} (warning)"


def with_lines(problems: Iterable[Problem], lines: Mapping[Path, int]) -> list[Problem]:
    """Give each problem the line of the deepest part of its path the file recorded."""
    out = []
    for p in problems:
        line = p.line
        for n in range(len(p.path), -1, -1):
            if line is not None:
                break
            line = lines.get(p.path[:n])
        out.append(replace(p, line=line))
    return out


class ConfigError(ValueError):
    """Invalid NodePool, EC2NodeClass, cluster file or snapshot. The message names the object and field;
    with ``source`` (a file) and ``problems`` (``"field.path: what is wrong"``), every problem is one line
    ``source: problem``."""

    def __init__(self, message: str = "", *, source: str = "", problems: Sequence[str] = (),
                 fields: Sequence[tuple[Path, str]] = ()) -> None:
        self.source = source
        self.problems = list(problems) or [message]
        # Structured form of a parser's findings: (path inside the object, message).
        self.fields = list(fields)
        self.findings: list[Problem] = []
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems) if source else message)

    @classmethod
    def from_problems(cls, problems: Sequence[Problem], *, source: str) -> ConfigError:
        """The error for a file's findings: one ``file:line: object: field: message`` line each."""
        exc = cls(source=source, problems=[p.render() for p in problems])
        exc.findings = list(problems)
        exc.args = ("\n".join(p.render(source) for p in problems),)
        return exc

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def describe_validation_error(subject: str, exc: ValidationError, *, path_prefix: str = "") -> ConfigError:
    """Turn a pydantic error into one readable message: ``EC2NodeClass default: spec.role: ...``."""
    lines = []
    fields: list[tuple[Path, str]] = []
    prefix: Path = tuple(p for p in path_prefix.split(".") if p)
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        path = f"{path_prefix}{loc}" if loc else (path_prefix.rstrip(".") or "(root)")
        lines.append(f"{subject}: {path}: {err['msg']}")
        fields.append((prefix + tuple(err["loc"]), err["msg"].removeprefix("Value error, ")))
    return ConfigError("; ".join(lines), fields=fields)


def manifest_header(obj: Mapping[str, Any], *, default_kind: str,
                    default_api: str) -> tuple[str, str, str, str, Mapping[str, Any]]:
    """``(kind, apiVersion, name, subject, spec)`` of a Karpenter manifest; ``subject`` ("NodePool
    default") starts every error message. Raises ConfigError without a name or a spec."""
    kind = str(obj.get("kind") or default_kind)
    api = str(obj.get("apiVersion") or default_api)
    name = str((obj.get("metadata") or {}).get("name") or "")
    subject = f"{kind} {name or '<unnamed>'}"
    if not name:
        raise ConfigError(f"{subject}: metadata.name is required")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{subject}: spec is required")
    return kind, api, name, subject, spec
