"""Many runs side by side: config/environment diff, sweep table, curve bands across seeds (analysis layer).

Works on manifests and metrics tables of ``app.data.runs``; no trace is needed.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from app.analysis.compare.labels import unique_labels
from app.analysis.curves.smoothing import debiased_ema
from app.analysis.memory.peak import pick_peak, system_peak_sources
from app.analysis.run.step_time import steady_step_time
from app.data.runs import RunData
from profiler_agent.runformat import Manifest

__all__ = [
    "flatten_manifest",
    "diff_config",
    "compute_sweep_table",
    "SWEEP_OUTCOMES",
    "compute_curve_bands",
    "BAND_COLUMNS",
]

SWEEP_OUTCOMES = ["median_step_time_s", "samples_per_s", "final_loss", "best_loss", "peak_memory_bytes"]
BAND_COLUMNS = ["group", "step", "mean", "lo", "hi", "runs"]


def _flat(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = json.dumps(value, default=str)
    else:
        out[prefix] = "" if value is None else str(value)


def flatten_manifest(m: Manifest) -> dict[str, str]:
    """Config and environment of a run as flat ``key → text``: ``config.*``, ``versions.*``,
    ``git.*``, ``device``, ``world_size``, ``host``, ``command``."""
    out: dict[str, str] = {}
    _flat("config", dict(m.config), out)
    _flat("versions", dict(m.versions), out)
    _flat("git", dict(m.git), out)
    out["device"] = ", ".join(str(d.get("name", d.get("type", "?"))) for d in m.devices) or "cpu"
    out["world_size"] = str(m.world_size)
    out["host"] = m.host or ""
    out["command"] = " ".join(m.command)
    return out


def diff_config(manifests: Sequence[Manifest | None], labels: Sequence[str]) -> pd.DataFrame:
    """Keys whose values differ between the runs: column ``key`` then one column per label
    (values as text, empty when a run lacks the key). A None manifest (bare traces) is
    skipped. Empty when fewer than two manifests are given."""
    present = [(lab, m) for lab, m in zip(labels, manifests, strict=True) if m is not None]
    if len(present) < 2:
        return pd.DataFrame(columns=["key", *labels])
    cols = unique_labels([lab for lab, _ in present])
    flat = [flatten_manifest(m) for _, m in present]
    keys = sorted(set().union(*flat), key=lambda k: (not k.startswith("config."), k))
    rows = []
    for key in keys:
        values = [f.get(key, "") for f in flat]
        if len(set(values)) > 1:
            rows.append({"key": key, **dict(zip(cols, values, strict=True))})
    return pd.DataFrame(rows, columns=["key", *cols])



def _rank0(metrics: pd.DataFrame) -> pd.DataFrame:
    if "rank" in metrics.columns and (metrics["rank"] == 0).any():
        return metrics[metrics["rank"] == 0]
    return metrics


def _number(metrics: pd.DataFrame, key: str) -> np.ndarray:
    if key not in metrics.columns:
        return np.array([])
    v = pd.to_numeric(metrics[key], errors="coerce").to_numpy(float, na_value=np.nan)
    out: np.ndarray = v[np.isfinite(v)]
    return out


def _outcomes(run: RunData) -> dict[str, Any]:
    m = _rank0(run.metrics)
    # The headline step time of the catalog, the Overview and the verdicts (app.analysis.run.step_time:
    # steady-state median, warm-up, profiled and evaluation steps dropped, slowest rank per step).
    headline = steady_step_time(run.metrics.to_dict("records")) if "step_time_s" in run.metrics.columns else None
    loss = _number(m, "loss")
    # System samples only (no trace is read for a sweep): the GPU allocator's peak, else host RSS.
    best, source = pick_peak(system_peak_sources(run.system))
    peak = best if best is not None else np.nan
    median = headline.value_s if headline is not None and headline.value_s is not None else np.nan
    throughput = headline.samples_per_s if headline is not None else None
    return {
        "median_step_time_s": median,
        "samples_per_s": throughput if throughput is not None else np.nan,
        "final_loss": float(np.median(loss[-max(1, min(20, -(-len(loss) // 10))):])) if len(loss) else np.nan,
        "best_loss": float(loss.min()) if len(loss) else np.nan,
        "peak_memory_bytes": peak,
        "peak_memory_source": source,
    }


def compute_sweep_table(runs: Sequence[RunData]) -> tuple[pd.DataFrame, list[str]]:
    """One row per run (``id``, ``name``, ``path``, ``config.*`` hyperparameters, SWEEP_OUTCOMES)
    and the list of config columns that vary across the runs (the sweep's axes)."""
    rows = []
    for run in runs:
        cfg: dict[str, str] = {}
        _flat("config", dict(run.manifest.config), cfg)
        row: dict[str, Any] = {"id": run.manifest.id, "name": run.manifest.name, "path": str(run.path)}
        for k, v in cfg.items():
            num = pd.to_numeric(pd.Series([v]), errors="coerce").iat[0]
            row[k] = float(num) if pd.notna(num) else v
        row.update(_outcomes(run))
        rows.append(row)
    table = pd.DataFrame(rows)
    if len(table) == 0:
        return pd.DataFrame(columns=["id", "name", "path", *SWEEP_OUTCOMES]), []
    varying = [c for c in table.columns if c.startswith("config.") and table[c].astype(str).nunique() > 1]
    return table, varying


def compute_curve_bands(
    metrics_by_run: Mapping[str, pd.DataFrame],
    key: str,
    groups: Mapping[str, str],
    *,
    smoothing: float = 0.6,
    spread: Literal["std", "range"] = "std",
) -> pd.DataFrame:
    """Mean ± spread of a metric across the runs of each group (e.g. seeds of one config).

    Each run's rank-0 curve is smoothed (debiased EMA) and aligned by ``step``; per group and
    step, ``mean`` is the mean over runs and ``lo``/``hi`` are mean ∓ std (``spread="std"``) or
    the min and max (``"range"``); ``runs`` counts the runs that logged that step. Columns
    BAND_COLUMNS. Runs without the key are skipped.
    """
    if spread not in ("std", "range"):
        raise ValueError(f"spread must be 'std' or 'range', got {spread!r}")
    parts = []
    for label, metrics in metrics_by_run.items():
        if key not in metrics.columns or "step" not in metrics.columns:
            continue
        m = _rank0(metrics)
        v = pd.to_numeric(m[key], errors="coerce").to_numpy(float, na_value=np.nan)
        ok = np.isfinite(v)
        if not ok.any():
            continue
        parts.append(pd.DataFrame({"group": groups.get(label, label), "run": label,
                                   "step": pd.to_numeric(m["step"], errors="coerce").to_numpy()[ok],
                                   "value": debiased_ema(v[ok], smoothing)}))
    if not parts:
        return pd.DataFrame(columns=BAND_COLUMNS)
    g = pd.concat(parts, ignore_index=True).groupby(["group", "step"], sort=True)["value"]
    out = g.agg(["mean", "std", "min", "max", "count"]).reset_index()
    std = out["std"].fillna(0.0)
    out["lo"] = out["mean"] - std if spread == "std" else out["min"]
    out["hi"] = out["mean"] + std if spread == "std" else out["max"]
    return out.rename(columns={"count": "runs"})[BAND_COLUMNS]
