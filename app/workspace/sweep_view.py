"""A stored sweep for the front ends: its state, its trials table, Optuna's parameter importance (workspace layer).

The Compare page's ``?sweep=<id>`` view calls ``load_sweep_view``. Importance comes from
Optuna's ``get_param_importances`` on the sweep's own study (``--optuna`` sweeps); a grid or
random sweep has none, and the view says so instead of inventing one.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.analysis.compare.sweep_trials import SweepTrials, compute_sweep_trials
from app.workspace.sweep_state import SweepState, list_sweeps, read_sweep, study_storage_url, sweeps_dir
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["SweepView", "load_sweep_view", "list_sweep_ids", "param_importance"]


@dataclass(frozen=True)
class SweepView:
    state: SweepState
    trials: SweepTrials
    importance: Mapping[str, float] | None  # param name → Optuna's importance (sums to 1)
    importance_note: str  # why there is none, when there is none


def list_sweep_ids(root: str | os.PathLike[str]) -> Sequence[str]:
    """The ids of the store's sweeps, newest first."""
    return [s.id for s in list_sweeps(layout.resolve_root(root))]


def param_importance(root: Path, state: SweepState) -> tuple[Mapping[str, float] | None, str]:
    """Optuna's importance of each parameter for the sweep's study, or None and the reason."""
    if state.spec.method != "optuna":
        return None, (f"not available: this is a {state.spec.method} sweep; parameter importance comes from "
                      "an Optuna study (torchscope sweep --optuna N)")
    if not (sweeps_dir(root) / f"{state.id}.optuna.sqlite3").is_file():
        return None, "not available: the sweep's Optuna study file is missing"
    try:
        import optuna
    except ImportError:
        return None, "not available: Optuna is not installed (pip install optuna)"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=state.id, storage=study_storage_url(root, state.id))
        complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if len(complete) < 2:
            return None, f"not available: Optuna needs at least 2 complete trials ({len(complete)} so far)"
        return dict(optuna.importance.get_param_importances(study)), ""
    except Exception as e:  # noqa: BLE001 - Optuna's own errors (too few distinct values, storage): say why
        return None, f"not available: Optuna could not compute it ({type(e).__name__}: {e})"


def load_sweep_view(root: str | os.PathLike[str], sid: str) -> SweepView:
    """The sweep ``sid`` of store ``root``. Raises UsageError when there is no such sweep and
    CorruptFileError when its state file is broken."""
    store = layout.resolve_root(root)
    state = read_sweep(store, sid)
    names: dict[str, str] = {}
    for t in state.trials:
        if t.run_id and (store / t.run_id).is_dir():
            try:
                names[t.run_id] = rf.read_manifest(store / t.run_id).name
            except rf.TorchscopeError:
                continue
    log_ranges = {p["name"]: (float(p["low"]), float(p["high"])) for p in state.spec.params
                  if p.get("kind") == "loguniform" and p.get("low") is not None and p.get("high") is not None}
    trials = compute_sweep_trials([t.to_dict() for t in state.trials], [p["name"] for p in state.spec.params],
                                  direction=state.spec.direction, names=names, log_ranges=log_ranges)
    importance, note = param_importance(store, state)
    return SweepView(state=state, trials=trials, importance=importance, importance_note=note)
