"""Record-level facts of a run for its catalog row: peak memory, replicate group, search text (data layer, pure Python).

The catalog itself (rows with step times and final values, which need the analysis rules) is
built in app.workspace.catalog_rows; these helpers are plain Python over the JSON-lines records
and the manifest, without pandas, so that a cold store of 1,000 runs lists in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from profiler_agent import runformat as rf

__all__ = ["STEPS_SOURCES", "peak_memory_from_records", "search_text", "run_group", "record_number",
           "record_rank"]

# Where a row's steps and step time come from (column ``steps_source``): the run's metrics.jsonl;
# the profiled steps of its traces, read from the trace analysis cache (app.workspace.cached_steps);
# or not known yet: the run has traces that were never analysed (opening the run fills it in).
STEPS_SOURCES = ("metrics", "trace", "in trace")

# GPU runs: the allocator's peak; CPU runs: resident set of the process and its children.
_GPU_PEAK_KEYS = ("peak_memory_bytes", "gpu_max_allocated_bytes", "gpu_allocated_bytes")


def record_number(value: Any) -> float | None:
    """``value`` as a finite float, or None (booleans, missing, non-numeric, NaN, inf)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def record_rank(record: Mapping[str, Any]) -> int:
    """The record's ``rank`` (0 when absent)."""
    r = record_number(record.get("rank"))
    return int(r) if r is not None else 0


def peak_memory_from_records(
    records: Iterable[Mapping[str, Any]], rank: int | None = None
) -> tuple[int | None, str]:
    """(peak bytes, what it measures) from system samples: the GPU allocator's peak when
    sampled, else the largest resident set of the process plus its children (DataLoader workers)."""
    rows = [r for r in records if rank is None or record_rank(r) == rank]
    for key in _GPU_PEAK_KEYS:
        values = [v for v in (record_number(r.get(key)) for r in rows) if v is not None]
        if values:
            return int(max(values)), "GPU allocated (peak)"
    rss = []
    for r in rows:
        v = record_number(r.get("rss_bytes"))
        if v is not None:
            rss.append(v + (record_number(r.get("children_rss_bytes")) or 0.0))
    if rss:
        return int(max(rss)), "resident set of the process and its children (peak sample)"
    return None, ""


def run_group(m: rf.Manifest) -> str | None:
    """The run's replicate group (``torchscope run --group NAME``), or None: a typed manifest
    field when the run format has one, else the ``group`` key kept in ``Manifest.extra``."""
    group = getattr(m, "group", None)
    if group is None:
        group = m.extra.get("group") if isinstance(m.extra, Mapping) else None
    if group is None or isinstance(group, bool):
        return None
    text = str(group).strip()
    return text or None


def search_text(m: rf.Manifest) -> str:
    """Lower-case text the catalog filter searches: name, id, tags, notes, config ``key=value``."""
    parts = [m.name, m.id, *m.tags, m.notes, run_group(m) or "", *(f"{k}={v}" for k, v in m.config.items())]
    return " ".join(str(p) for p in parts).lower()
