"""Labels for tables and charts (analysis layer, pure, no imports from the app).

A leaf module on purpose: the chart modules and the comparison modules both use it.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["unique_labels"]


def unique_labels(labels: Iterable[Any]) -> list[str]:
    """Labels made unique by numbering repeats (``name``, ``name (2)``, …): charts draw equal
    category labels on one bar or merge pie slices, and two runs with one name must stay apart."""
    seen: dict[str, int] = {}
    out = []
    for label in map(str, labels):
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out
