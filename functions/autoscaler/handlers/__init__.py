"""Thin Lambda entry points: parse input, build adapters once per container, call one service."""
