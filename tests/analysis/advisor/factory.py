"""Hand-made evidence for advisor rule tests: metrics curves, step tables and trace events."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.advisor import RunEvidence

EVENT_COLUMNS = ["name", "cat", "ts_us", "dur_us", "pid", "tid", "correlation", "external_id", "device",
                 "stream", "input_shapes", "input_types", "bytes", "sequence", "fwd_tid"]


def metrics(**columns: Any) -> pd.DataFrame:
    """A metrics table for rank 0: ``metrics(loss=[...], lr=[...])`` (steps 0..n-1)."""
    n = max(len(v) for v in columns.values())
    df = pd.DataFrame({"step": np.arange(n), "time": np.arange(n) * 0.1, "rank": 0})
    for k, v in columns.items():
        df[k] = pd.Series(v, dtype=float)
    return df


def events(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """An events table with every trace-engine column; missing fields are empty."""
    df = pd.DataFrame([{c: r.get(c) for c in EVENT_COLUMNS} for r in rows], columns=EVENT_COLUMNS)
    for c in ("ts_us", "dur_us"):
        df[c] = df[c].astype(float)
    for c in ("correlation", "external_id", "device", "stream", "bytes", "sequence", "fwd_tid"):
        df[c] = df[c].astype("Int64")
    for c in ("name", "cat", "pid", "tid", "input_shapes", "input_types"):
        df[c] = df[c].fillna("").astype(str).astype("category")
    return df.sort_values("ts_us", kind="stable").reset_index(drop=True)


def trace(evs: pd.DataFrame, *, rank: int = 0, meta: dict[str, Any] | None = None,
          memory: pd.DataFrame | None = None) -> SimpleNamespace:
    mem = memory if memory is not None else pd.DataFrame(columns=["ts_us", "device_type", "device_id", "addr", "bytes",
                                                                  "total_allocated_bytes", "total_reserved_bytes"])
    return SimpleNamespace(rank=rank, meta=meta or {}, events=evs, memory=mem, path="hand-made")


def steps(n: int = 4, *, rank: int = 0, duration_us: float = 10_000.0, t0: float = 0.0, **parts_us: float) -> pd.DataFrame:
    """A step table: ``n`` consecutive steps; ``parts_us`` gives each category's µs per step."""
    rows = []
    for i in range(n):
        start = t0 + i * duration_us
        row = {"rank": rank, "step": i, "start_us": start, "end_us": start + duration_us, "duration_us": duration_us,
               "host_start_us": start, "host_end_us": start + duration_us}
        for c in ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other",
                  "forward", "backward", "optimizer"):
            row[f"{c}_us"] = parts_us.get(c, 0.0)
        rows.append(row)
    return pd.DataFrame(rows)


def evidence(*, has_run: bool = True, metrics_df: pd.DataFrame | None = None, steps_df: pd.DataFrame | None = None,
             traces: list[Any] | None = None, config: dict[str, Any] | None = None,
             devices: tuple[dict[str, Any], ...] = (), memory_peaks: pd.DataFrame | None = None,
             module_tree: dict[str, Any] | None = None) -> RunEvidence:
    analysis = None
    if steps_df is not None or memory_peaks is not None:
        analysis = SimpleNamespace(steps=steps_df if steps_df is not None else pd.DataFrame(),
                                   memory_peaks=memory_peaks if memory_peaks is not None else pd.DataFrame())
    return RunEvidence(source="hand-made", has_run=has_run, config=config or {}, devices=devices,
                       metrics=metrics_df, traces=tuple(traces or ()), analysis=analysis, module_tree=module_tree)


def kernel_step(t0: float, *, n_kernels: int, kernel_us: float, gap_us: float = 0.0, name: str = "k",
                corr0: int = 0, op: str | None = None, op_types: str = "", tid: str = "1") -> list[dict[str, Any]]:
    """Host launches (with an enclosing op when ``op``) and their kernels, back to back."""
    rows: list[dict[str, Any]] = []
    t = t0
    for i in range(n_kernels):
        corr = corr0 + i
        if op:
            rows.append({"name": op, "cat": "cpu_op", "ts_us": t, "dur_us": 4.0, "pid": "1", "tid": tid,
                         "input_types": op_types})
        rows.append({"name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts_us": t + 1, "dur_us": 2.0, "pid": "1",
                     "tid": tid, "correlation": corr})
        rows.append({"name": name, "cat": "kernel", "ts_us": t + 3, "dur_us": kernel_us, "pid": "0", "tid": "7",
                     "correlation": corr, "device": 0, "stream": 7})
        t += 3 + kernel_us + gap_us
    return rows
