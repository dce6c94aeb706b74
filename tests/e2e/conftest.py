"""End-to-end fixtures: the handler tests' moto + emulator world."""

from __future__ import annotations

from tests.handlers.conftest import _emulator_without_nagle, aws, world

__all__ = ["_emulator_without_nagle", "aws", "world"]
