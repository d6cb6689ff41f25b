"""torch.profiler's ``export_memory_timeline`` raw output as a table (data layer).

``prof.export_memory_timeline("x.raw.json[.gz]")`` writes a JSON list of
``[time_ns, action, bytes, category]`` records for one device (time -1 = allocated before
profiling). Actions and categories are torch's enum positions (torch/profiler/_memory_profiler.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from app.data.memory_records import NotRecords, read_record_array
from app.data.safe_io import iter_limited
from app.errors import TraceError
from profiler_agent.runformat.errors import CorruptFileError

__all__ = ["RAW_ACTIONS", "RAW_CATEGORIES", "load_memory_timeline_raw"]

RAW_ACTIONS = {1: "preexisting", 2: "create", 3: "increment_version", 4: "destroy"}
RAW_CATEGORIES = ["parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
                  "autograd_detail", "unknown"]


def load_memory_timeline_raw(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Return ``ts_us``, ``action``, ``bytes`` (signed), ``category``, ``allocated_bytes`` (running
    total over all categories) and ``category_bytes`` (running total within the category).

    Raises TraceError when the file cannot be read or is not a list of 4-number records.
    """
    p = Path(path)
    try:
        recs = read_record_array(iter_limited(p), lenient=True)
    except (OSError, CorruptFileError) as e:
        raise TraceError(f"{p}: cannot be read: {e}") from None
    except (msgspec.DecodeError, msgspec.ValidationError, NotRecords) as e:
        raise TraceError(f"{p}: not a memory timeline (expected a JSON list of "
                         f"[time_ns, action, bytes, category] records): {e}") from None
    if not len(recs):
        return pd.DataFrame(columns=["ts_us", "action", "bytes", "category", "allocated_bytes", "category_bytes"])
    t, a, b, c = recs[:, 0].astype(np.float64), recs[:, 1], recs[:, 2], recs[:, 3]
    c = np.where(c < 0, len(RAW_CATEGORIES) - 1, c)  # a null category (-1) is "unknown"
    start = t[t >= 0].min() if (t >= 0).any() else 0.0
    ts_us = np.where(t < 0, start, t) / 1e3  # pre-existing memory is shown at the first timestamp
    df = pd.DataFrame({
        "ts_us": ts_us,
        "action": pd.Categorical([RAW_ACTIONS.get(int(v), f"action{int(v)}") for v in a]),
        "bytes": b.astype(np.int64),
        "category": pd.Categorical([RAW_CATEGORIES[v] if 0 <= v < len(RAW_CATEGORIES) else "unknown" for v in c]),
    }).sort_values("ts_us", kind="stable", ignore_index=True)
    df["allocated_bytes"] = df["bytes"].cumsum()
    df["category_bytes"] = df.groupby("category", observed=True)["bytes"].cumsum()
    return df
