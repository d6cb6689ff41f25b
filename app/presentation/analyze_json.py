"""The ``torchscope analyze --json`` document of a TraceAnalysis (presentation layer; fields in docs/trace-engine.md).

::

    {"traces": [{path, rank, events, warnings}], "steps": [...], "ops": [...] (self_us desc),
     "kernels": [...], "memory": {device: {peak_allocated_bytes, peak_reserved_bytes}},
     "ranks": [{step, ranks, slowest_rank, slowest_us, fastest_rank, fastest_us, spread_us}],
     "rank_summary": [{rank, steps, step_time_s, compute_s, communication_s, overlap_s, overlap_share,
                       dataloader_s, host_s, other_s, straggler_score, last_share, late_s, sync_points,
                       basis, straggler_p, evidence_steps, clock_offset_s, cause, cause_excess_s}],
     "windows": [{reason, label, detail, rank, trace, evaluation, typical, steps, first_step, last_step,
                  median_step_us, ratio_to_typical}]}

``windows`` is there only for a run whose manifest records its profiler windows: why each was
taken (``early``, ``evaluation``, ``anomaly``, ...), and whether its steps count as typical. With
anomaly windows, ``ops`` and ``kernels`` are over the other windows' traces only; ``steps`` keeps
every profiled step.

Field names are stable. Pure: takes an analysis, returns a dict.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from app.analysis.trace.ranks import RANK_SUMMARY_KEYS
from app.analysis.trace.summary import TraceAnalysis
from app.presentation.jsonable import to_jsonable

__all__ = ["analysis_to_json", "JSON_STEP_KEYS"]

JSON_STEP_KEYS = ["rank", "step", "start_us", "end_us", "duration_us", "kernel_us", "memcpy_us", "memset_us",
                  "communication_us", "runtime_us", "dataloader_us", "cpu_exec_us", "other_us", "forward_us",
                  "backward_us", "optimizer_us"]


def _records(df: pd.DataFrame, cols: Sequence[str]) -> list[dict[str, Any]]:
    cols = [c for c in cols if c in df.columns]
    return [{c: to_jsonable(v, digits=3) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False, name=None)]


def analysis_to_json(analysis: TraceAnalysis, *, max_ops: int | None = None,
                     max_kernels: int | None = None, windows: pd.DataFrame | None = None) -> dict[str, Any]:
    """The CLI document of ``analysis`` (see the module docstring); ``max_ops``/``max_kernels``
    bound the op and kernel lists; ``windows`` (app.analysis.trace.windows.compute_window_table)
    adds the ``windows`` list."""
    ops = analysis.ops if max_ops is None else analysis.ops.head(max_ops)
    kernels = analysis.kernels if max_kernels is None else analysis.kernels.head(max_kernels)
    return {
        "traces": analysis.traces,
        "steps": _records(analysis.steps, JSON_STEP_KEYS),
        "ops": _records(ops, ["name", "calls", "self_us", "total_us", "device_self_us", "mean_us", "share"]),
        "kernels": _records(kernels, ["name", "calls", "total_us", "mean_us", "share"]),
        "memory": analysis.memory,
        "ranks": _records(analysis.rank_skew, list(analysis.rank_skew.columns)),
        "rank_summary": [{k: to_jsonable(row[k], digits=9) for k in RANK_SUMMARY_KEYS} for row in analysis.rank_summary],
    } | ({"windows": _records(windows, list(windows.columns))} if windows is not None else {})
