"""The ``torchscope diff --json`` document of a Comparison (presentation layer; fields in docs/compare.md).

Field names are a contract: add fields, never rename or remove them without bumping ``schema``.
Numbers that are not finite (no data) become ``null``. Pure: takes a comparison (whose sides
carry their memory category peaks, loaded by the workspace), returns a dict.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.compare.comparison import Comparison
from app.analysis.compare.memory_categories import (
    MemoryCategoryComparison,
    compare_side_memory_categories,
    memory_category_records,
)
from app.analysis.compare.side import CompareSide
from app.presentation.jsonable import to_jsonable
from app.presentation.ranks_text import comparison_stragglers

__all__ = ["JSON_SCHEMA", "comparison_to_json", "json_number", "table_records"]

JSON_SCHEMA = "torchscope.diff/1"


def json_number(v: Any) -> float | int | None:
    """``v`` as a JSON number, or None when it is missing or not finite."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return int(v) if isinstance(v, (int, np.integer)) else f


def table_records(df: pd.DataFrame | None, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of ``df`` as JSON-ready dicts (NaN → null), at most ``limit`` rows."""
    if df is None or len(df) == 0:
        return []
    part = df.head(limit) if limit else df
    return [{str(k): to_jsonable(v, other=str) for k, v in rec.items()} for rec in part.to_dict(orient="records")]


def _side(side: CompareSide, source: str, table: pd.DataFrame, profiled: int) -> dict[str, Any]:
    kept = table["kept"].astype(bool) if len(table) else pd.Series(dtype=bool)
    return {
        "label": side.label,
        "kind": str(side.kind),
        "id": side.run.manifest.id if side.run is not None else None,
        "path": str(side.path),
        "step_source": source,
        "steps": int(len(table)),
        "steps_kept": int(kept.sum()),
        "steps_warmup": int((table["reason"] == "warm-up").sum()) if len(table) else 0,
        "steps_profiled_excluded": int((table["reason"] == "profiled").sum()) if len(table) else 0,
        "steps_evaluation_excluded": int((table["reason"] == "evaluation").sum()) if len(table) else 0,
        "steps_compile_excluded": int((table["reason"] == "compile").sum()) if len(table) else 0,
        "profiled_steps": profiled,
        "compile": compile_counts(side),
    }


def compile_counts(side: CompareSide) -> dict[str, Any] | None:
    """The run's torch.compile counts (run.json ``compile``: graph_breaks, recompiles, frames, ...), or None."""
    extra = side.run.manifest.extra if side.run is not None else {}
    counts = extra.get("compile") if isinstance(extra, dict) else None
    if not isinstance(counts, dict):
        return None
    return {str(k): json_number(v) for k, v in counts.items()}


def _estimate(est: Any, verdict: Any, base_key: str, cand_key: str) -> dict[str, Any]:
    if est is None:
        return {base_key: None, cand_key: None, "ratio": None, "ci95": [None, None], "verdict": str(verdict),
                "n_baseline": 0, "n_candidate": 0}
    return {base_key: json_number(est.baseline), cand_key: json_number(est.candidate),
            "ratio": json_number(est.ratio), "ci95": [json_number(est.lo), json_number(est.hi)],
            "verdict": str(verdict), "n_baseline": est.n_baseline, "n_candidate": est.n_candidate}


def _load(load: Any) -> dict[str, Any] | None:
    return None if load is None else {k: json_number(v) for k, v in load.to_json().items()}


def _breakdown(df: pd.DataFrame, view: str) -> list[dict[str, Any]]:
    if len(df) == 0:
        return []
    part = df[(df["view"] == view) & (df["category"] != "step")]
    return table_records(part[["category", "baseline_us", "candidate_us", "delta_us", "delta_share"]])


def comparison_to_json(cmp: Comparison, *, top: int | None = 200,
                       memory_categories: MemoryCategoryComparison | None = None) -> dict[str, Any]:
    """The documented JSON document of a comparison; ``top`` bounds the ops/kernels lists.
    ``memory_categories`` (per-category memory of both sides) is computed from the sides'
    category peaks when not given."""
    cats = memory_categories if memory_categories is not None \
        else compare_side_memory_categories(cmp.baseline, cmp.candidate)
    o = cmp.options
    step = _estimate(cmp.step_time, cmp.step_verdict, "baseline_s", "candidate_s")
    step.update({"statistic": "median", "confidence": o.confidence, "resamples": o.resamples, "seed": o.seed,
                 "threshold": o.threshold})
    tp = _estimate(cmp.throughput, cmp.throughput_verdict, "baseline", "candidate")
    tp["unit"] = cmp.throughput_unit
    mem_a, mem_b = cmp.peak_memory
    step_rows = cmp.breakdown[cmp.breakdown["category"] == "step"] if len(cmp.breakdown) else cmp.breakdown
    trace_step = None
    if len(step_rows):
        r = step_rows.iloc[0]
        trace_step = {"baseline_us": json_number(r["baseline_us"]), "candidate_us": json_number(r["candidate_us"]),
                      "delta_us": json_number(r["delta_us"]), "statistic": "mean profiled step",
                      "baseline_steps": cmp.breakdown_steps[0], "candidate_steps": cmp.breakdown_steps[1]}
    return {
        "schema": JSON_SCHEMA,
        "headline": cmp.headline.to_json(),
        "baseline": _side(cmp.baseline, cmp.step_source[0], cmp.step_times[0], cmp.profiled_steps[0]),
        "candidate": _side(cmp.candidate, cmp.step_source[1], cmp.step_times[1], cmp.profiled_steps[1]),
        "step_time": step,
        "throughput": tp,
        "peak_memory": {"baseline_bytes": json_number(mem_a.bytes), "candidate_bytes": json_number(mem_b.bytes),
                        "ratio": json_number(cmp.memory_ratio), "verdict": str(cmp.memory_verdict),
                        "source": mem_a.source, "quantity": mem_a.quantity, "description": mem_a.description},
        "trace_step": trace_step,
        "breakdown_delta": _breakdown(cmp.breakdown, "device"),
        "phase_delta": _breakdown(cmp.breakdown, "phase"),
        "ops": table_records(cmp.ops, top),
        "kernels": table_records(cmp.kernels, top),
        "metrics": table_records(cmp.metrics),
        "config_diff": table_records(cmp.config),
        "module_diff": table_records(cmp.modules),
        "memory_categories": memory_category_records(cats.table),
        "machine_load": {"baseline": _load(cmp.machine_load[0]), "candidate": _load(cmp.machine_load[1]),
                         "warning": cmp.load_warning or None},
        "step_sets": {name: step_set.to_json() for name, step_set in cmp.step_sets.items()},
        "sign_note": cmp.sign_note or None,
        "contention": _contention(cmp),
        "notes": list(cmp.notes) + list(cats.notes),
        # inference runs only (docs/compare.md "Inference latency"): p50/p90/p99 per sample with intervals
        **({"latency": table_records(cmp.latency)} if cmp.latency is not None else {}),
    } | _stragglers(cmp)


def _stragglers(cmp: Comparison) -> dict[str, Any]:
    """``{"stragglers": ...}`` when a side's traces hold two ranks or more, else nothing (docs/compare.md)."""
    change = comparison_stragglers(cmp)
    return {} if change is None else {"stragglers": to_jsonable(change, digits=9)}


def _contention(cmp: Comparison) -> dict[str, Any]:
    c = cmp.contention

    def side(s: Any) -> dict[str, Any] | None:
        return None if s is None else {"mean": json_number(s.mean), "contended_share": json_number(s.contended),
                                       "steps": s.steps}

    return {"source": c.source, "inconclusive": c.inconclusive, "baseline": side(c.baseline),
            "candidate": side(c.candidate), "reason": c.reason or None}
