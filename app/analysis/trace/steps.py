"""The per-step time table of a set of traces (analysis layer: tables in, tables out).

``compute_steps`` returns one row per (rank, step) of ``step_spans.find_steps`` with the duration
and both breakdowns (device view and training-loop view, see ``step_views``); every row's
categories sum to its duration.
"""
from __future__ import annotations

import pandas as pd

from app.analysis.trace.categories import DEVICE_CATEGORIES, LOOP_CATEGORIES
from app.analysis.trace.step_spans import find_steps
from app.analysis.trace.step_views import device_view, loop_view
from app.data.trace import TraceSet

__all__ = ["STEP_COLUMNS", "DEVICE_CATEGORIES", "LOOP_CATEGORIES", "compute_steps"]

STEP_COLUMNS = (["rank", "step", "start_us", "end_us", "duration_us"]
                + [f"{c}_us" for c in DEVICE_CATEGORIES] + [f"{c}_us" for c in LOOP_CATEGORIES]
                + ["loop_dataloader_us", "loop_other_us", "host_start_us", "host_end_us", "source"])


def compute_steps(traces: TraceSet, *, nccl_by_name: bool = True) -> pd.DataFrame:
    """Return the step table (STEP_COLUMNS) of the traces (one per rank).

    Each row's device-view categories (``kernel_us`` … ``other_us``) sum to ``duration_us``, and so
    do the training-loop columns (``forward_us``, ``backward_us``, ``optimizer_us``,
    ``loop_dataloader_us``, ``loop_other_us``). ``nccl_by_name=False`` applies torch-tb-profiler's
    exact Communication rule (collective kernels only when launched by an ``nccl:*`` op).
    """
    frames = []
    for t in traces:
        spans = find_steps(t.events)
        if len(spans.steps) == 0:
            continue
        dv = device_view(t.events, spans, nccl_by_name=nccl_by_name)
        lv = loop_view(t.events, spans)
        df = pd.DataFrame({"rank": t.rank, "step": spans.steps.astype(int), "start_us": spans.start,
                           "end_us": spans.end, "duration_us": spans.end - spans.start})
        for c in DEVICE_CATEGORIES:
            df[f"{c}_us"] = dv[c]
        for c in LOOP_CATEGORIES:
            df[f"{c}_us"] = lv[c]
        df["loop_dataloader_us"] = lv["dataloader"]
        df["loop_other_us"] = lv["other"]
        df["host_start_us"], df["host_end_us"], df["source"] = spans.host_start, spans.host_end, spans.source.value
        frames.append(df)
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "source" else float) for c in STEP_COLUMNS})
    out = pd.concat(frames, ignore_index=True)
    out["rank"] = out["rank"].astype(int)
    return out[STEP_COLUMNS].sort_values(["rank", "start_us"], ignore_index=True)
