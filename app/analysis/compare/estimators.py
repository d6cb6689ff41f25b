"""The interval methods the comparison headline uses, from app.analysis.stats.ratio (analysis layer).

This is the one place the comparison imports ``estimate_ratio``, ``hierarchical_ratio``,
``MIN_STEPS`` and ``RUN_TO_RUN_MARGIN``: the within-run method, the replicate method, the step
count below which a verdict is not judged, and the single-run margin of practical difference
(docs/compare.md, "The headline" and "Choosing the interval: the simulation study").
"""
from __future__ import annotations

from app.analysis.stats.ratio import (
    METHOD_YUEN,
    MIN_STEPS,
    RUN_TO_RUN_MARGIN,
    RatioEstimate,
    estimate_ratio,
    hierarchical_ratio,
)

__all__ = ["METHOD_YUEN", "MIN_STEPS", "RUN_TO_RUN_MARGIN", "estimate_ratio", "hierarchical_ratio", "estimate_method"]


def estimate_method(est: RatioEstimate, default: str) -> str:
    """The method an estimate names, else ``default``."""
    return str(est.method) if est.method else default
