"""Mean time per step of each breakdown category, per rank and view (analysis layer, pure).

The per-step views (device view as torch-tb-profiler's Overview, training-loop view) are defined
in ``step_views``; this module reduces the step table of ``steps.compute_steps`` to their means.
"""
from __future__ import annotations

import pandas as pd

from app.analysis.trace.categories import DEVICE_CATEGORIES
from app.analysis.trace.steps import compute_steps
from app.data.trace import TraceSet

__all__ = ["compute_breakdown"]


def compute_breakdown(traces: TraceSet, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Mean time per step of each category, per rank and view.

    Returns columns ``rank``, ``view`` ("device" | "loop"), ``category``, ``time_us`` (mean per
    step), ``total_us`` (over the steps) and ``share`` (of the mean step; sums to 1 per view).
    """
    if steps is None:
        steps = compute_steps(traces)
    rows = []
    loop_cols = {"forward": "forward_us", "backward": "backward_us", "optimizer": "optimizer_us",
                 "dataloader": "loop_dataloader_us", "other": "loop_other_us"}
    for rank, g in steps.groupby("rank", sort=True):
        dur = float(g["duration_us"].mean()) if len(g) else 0.0
        for view, cols in (("device", {c: f"{c}_us" for c in DEVICE_CATEGORIES}), ("loop", loop_cols)):
            for cat, col in cols.items():
                mean = float(g[col].mean())
                rows.append({"rank": int(rank), "view": view, "category": cat, "time_us": mean,
                             "total_us": float(g[col].sum()), "share": mean / dur if dur > 0 else 0.0})
    return pd.DataFrame(rows, columns=["rank", "view", "category", "time_us", "total_us", "share"])
