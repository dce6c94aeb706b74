"""End-to-end fixtures: the handler tests' moto + emulator world."""

from __future__ import annotations

from tests.handlers.conftest import aws, world

__all__ = ["aws", "world"]
