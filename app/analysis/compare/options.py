"""The knobs of a comparison, with their documented defaults (analysis layer)."""
from __future__ import annotations

from dataclasses import dataclass

from app.analysis.compare.tables import OpGrouping
from app.analysis.stats.ratio import DEFAULT_RESAMPLES, DEFAULT_SEED, DEFAULT_THRESHOLD

__all__ = ["CompareOptions"]


@dataclass(frozen=True)
class CompareOptions:
    """Knobs of a comparison; the defaults are the documented ones."""

    warmup_steps: int | None = None  # None: automatic (see compare_steps.auto_warmup)
    threshold: float = DEFAULT_THRESHOLD  # practical significance, as a fraction
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    confidence: float = 0.95
    op_grouping: OpGrouping = OpGrouping.NAME
