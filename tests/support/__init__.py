"""Reusable test helpers (no fixtures): checkers shared by several test modules."""
