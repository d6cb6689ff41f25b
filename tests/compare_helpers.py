"""Helpers shared by the comparison tests (analysis, CLI, page)."""
from __future__ import annotations

import os

import pytest

__all__ = ["skip_if_overloaded"]


def skip_if_overloaded(verdict: str, detail: str = "") -> None:
    """A timing verdict needs a machine that is not oversubscribed. When the verdict is not the
    expected "faster" and the load is far above the core count (other jobs competing for the
    CPUs while the samples were recorded), "same" is the honest answer: skip, do not fail."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if verdict != "faster" and load > 1.5 * cores:
        pytest.skip(f"machine overloaded (load {load:.1f} on {cores} cores): verdict {verdict} {detail}")
