"""A stored sweep's trials as a table: parameters, objective, state, the best trial (analysis layer, pure).

Input is the sweep state's records (app.workspace.sweep_state.SweepState.to_dict()["trials"]) and
the run names the workspace found; output is a DataFrame whose parameter columns are
``param.<name>`` and whose objective column is ``objective``, one row per trial (interrupted
trials are left out: their parameters ran again under the same or a new trial number).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["TRIAL_COLUMNS", "SweepTrials", "compute_sweep_trials", "param_column"]

TRIAL_COLUMNS = ["trial", "state", "objective", "id", "name", "duration_s", "reason"]


def param_column(name: str) -> str:
    return f"param.{name}"


@dataclass(frozen=True)
class SweepTrials:
    table: pd.DataFrame  # TRIAL_COLUMNS + param.<name>, + is_best
    params: list[str]  # the param.<name> columns, in the sweep's order
    numeric_params: list[str]  # those with numbers only (parallel coordinates, scatter axes)
    best: Mapping[str, Any] | None  # the best trial's row
    counts: Mapping[str, int]  # trials per state
    log_params: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # param.<name> → the searched (low, high) of a log-uniform parameter: drawn on a log axis


def compute_sweep_trials(trials: Sequence[Mapping[str, Any]], param_names: Sequence[str], *,
                         direction: str = "min", names: Mapping[str, str] | None = None,
                         log_ranges: Mapping[str, tuple[float, float]] | None = None) -> SweepTrials:
    """The trials table and the best complete trial (min or max objective by ``direction``).

    ``log_ranges`` maps a log-uniform parameter's name to its searched (low, high); it is kept in
    ``log_params`` when the column is numeric and every value is above zero (a log axis can show it).
    """
    names = names or {}
    rows = []
    for t in trials:
        if t.get("state") == "interrupted":
            continue
        start, end = t.get("started_at"), t.get("ended_at")
        row: dict[str, Any] = {
            "trial": int(t["number"]), "state": t.get("state"), "objective": t.get("objective"),
            "id": t.get("run_id") or "", "name": names.get(t.get("run_id") or "", t.get("run_id") or ""),
            "duration_s": end - start if isinstance(start, int | float) and isinstance(end, int | float) else None,
            "reason": t.get("reason") or "",
        }
        params = t.get("params") or {}
        for p in param_names:
            row[param_column(p)] = params.get(p)
        rows.append(row)
    cols = [*TRIAL_COLUMNS, *[param_column(p) for p in param_names]]
    table = pd.DataFrame(rows, columns=cols)
    table["objective"] = pd.to_numeric(table["objective"], errors="coerce")
    table["duration_s"] = pd.to_numeric(table["duration_s"], errors="coerce")
    numeric = []
    for p in param_names:
        col = param_column(p)
        as_num = pd.to_numeric(table[col], errors="coerce")
        if len(table) and as_num.notna().all():
            table[col] = as_num
            numeric.append(col)
    ok = table[(table["state"] == "complete") & table["objective"].notna()]
    best = None
    table["is_best"] = False
    if len(ok):
        idx = ok["objective"].idxmin() if direction == "min" else ok["objective"].idxmax()
        table.loc[idx, "is_best"] = True
        best = table.loc[idx].to_dict()
    counts = {str(k): int(v) for k, v in table["state"].value_counts().items()}
    log_params = {param_column(p): (float(lo), float(hi)) for p, (lo, hi) in (log_ranges or {}).items()
                  if param_column(p) in numeric and lo > 0 and hi > lo and bool((table[param_column(p)] > 0).all())}
    return SweepTrials(table=table, params=[param_column(p) for p in param_names], numeric_params=numeric,
                       best=best, counts=counts, log_params=log_params)
