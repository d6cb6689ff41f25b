"""The Compare page's many-run tabs: curves (overlay or mean ± spread), config diff, sweep; and a
stored sweep's own view (``?sweep=<id>``: torchscope sweep's trials) (UI layer)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd
import streamlit as st

from app.analysis.compare.many_runs import (
    SWEEP_OUTCOMES,
    compute_curve_bands,
    compute_sweep_table,
    diff_config,
)
from app.analysis.curves.smoothing import (
    SHORT_SERIES_POINTS,
    compute_curve,
    list_curve_keys,
    smooth_by_default,
)
from app.charts.compare import (
    make_band_figure,
    make_parallel_coordinates_figure,
    make_param_scatter_figure,
)
from app.charts.curves import curve_overlay_chart
from app.charts.sweep import make_sweep_objective_figure, make_sweep_parallel_coordinates_figure
from app.data.runs import RunData
from app.data.store_rows import run_group
from app.errors import TorchscopeError
from app.presentation.names import display_table, metric_display, metric_label
from app.ui.layout import RUN_PAGE, store_root
from app.workspace.catalog_query import query_runs, sweep_table
from app.workspace.sweep_view import SweepView, list_sweep_ids, load_sweep_view

# The curves tab's grouping by replicate group (torchscope run --group NAME) rather than a config key.
_REPLICATES = "(replicate group)"

__all__ = ["render_curves_tab", "render_config_tab", "render_sweep_tab", "render_stored_sweep", "unique_labels"]


def unique_labels(runs: Sequence[RunData]) -> list[str]:
    """Run names, with the id added where two runs share a name."""
    names = [r.name for r in runs]
    return [n if names.count(n) == 1 else f"{n} · {r.manifest.id}" for n, r in zip(names, runs, strict=True)]


def render_curves_tab(runs: Sequence[RunData]) -> None:
    labels = unique_labels(runs)
    keys: list[str] = []
    for r in runs:
        keys += [k for k in list_curve_keys(r.metrics) if k not in keys]
    if not keys:
        st.info("No logged metrics in these runs.")
        return
    c1, c2, c3 = st.columns(3)
    key = c1.selectbox("Metric", keys, index=keys.index("loss") if "loss" in keys else 0, key="compare_curve_key",
                       format_func=metric_label)
    smoothing = c2.slider("Smoothing", 0.0, 0.99, 0.6, 0.01, key="compare_smoothing")
    config_keys = sorted({k for r in runs for k in r.manifest.config})
    replicate = [run_group(r.manifest) for r in runs]
    by_replicates = [_REPLICATES] if any(replicate) else []
    group = c3.selectbox("Group runs by config key", ["(none)", *by_replicates, *config_keys], key="compare_group_by",
                         help="Runs with the same value (e.g. seeds of one config, or the runs of one replicate "
                              "group) become one mean ± std band.")
    metrics = {lab: r.metrics for lab, r in zip(labels, runs, strict=True)}
    if group == _REPLICATES:
        groups = {lab: f"group {g}" if g else lab for lab, g in zip(labels, replicate, strict=True)}
        _render_bands(metrics, key, groups, smoothing)
    elif group == "(none)":
        _render_overlay(metrics, key, smoothing)
    else:
        groups = {lab: f"{group}={r.manifest.config.get(group, '–')}" for lab, r in zip(labels, runs, strict=True)}
        _render_bands(metrics, key, groups, smoothing)


def _default_smoothing(metrics: dict[str, pd.DataFrame], key: str, smoothing: float) -> float:
    """``smoothing``, or 0 with a caption for the learning rate and series under SHORT_SERIES_POINTS."""
    points = max((int(pd.to_numeric(m[key], errors="coerce").notna().sum()) for m in metrics.values()
                  if key in m.columns), default=0)
    if smooth_by_default(key, points):
        return smoothing
    st.caption(f"{metric_label(key)} is drawn as logged: the learning rate and series under "
               f"{SHORT_SERIES_POINTS} points are not smoothed.")
    return 0.0


def _render_bands(metrics: dict[str, pd.DataFrame], key: str, groups: dict[str, str], smoothing: float) -> None:
    """Mean ± spread per group, in the Metrics tab's names, units and smoothing defaults."""
    bands = compute_curve_bands(metrics, key, groups, smoothing=_default_smoothing(metrics, key, smoothing))
    scale = metric_display(key).scale  # one unit per quantity: seconds are shown in ms
    if scale != 1.0 and len(bands):
        bands = bands.assign(**{c: bands[c] * scale for c in ("mean", "lo", "hi")})
    st.plotly_chart(make_band_figure(bands, metric_label(key)), width="stretch", key="compare_bands_fig")


def _render_overlay(metrics: dict[str, pd.DataFrame], key: str, smoothing: float) -> None:
    """One curve per run (Vega-Lite: no plotly.js to load), in the Metrics tab's names, units and
    smoothing defaults: the learning rate and series under SHORT_SERIES_POINTS points unsmoothed."""
    log_y = st.checkbox("Log scale", key="compare_log_y")
    shown = {lab: m for lab, m in metrics.items() if key in m.columns}
    smoothing = _default_smoothing(shown, key, smoothing)
    scale = metric_display(key).scale  # one unit per quantity: seconds are shown in ms
    curves = {}
    for lab, m in shown.items():
        c = compute_curve(m, key, smoothing=smoothing)
        curves[lab] = c.assign(value=c["value"] * scale, smoothed=c["smoothed"] * scale) if scale != 1.0 else c
    spec = curve_overlay_chart(curves, metric_label(key),
                               log_y=log_y and all(bool((c["value"] > 0).all()) for c in curves.values()))
    st.vega_lite_chart(spec, width="stretch", key="compare_curves_fig")


def render_config_tab(runs: Sequence[RunData]) -> None:
    table = diff_config([r.manifest for r in runs], unique_labels(runs))
    if table.empty:
        st.success("Config and environment are identical (hyperparameters, versions, devices, git commit).")
        return
    st.caption("Only the keys whose values differ; config.* are hyperparameters, versions.* the environment.")
    st.dataframe(table, hide_index=True, width="stretch")


def render_sweep_tab(selected: Sequence[RunData], store_table: Callable[[], pd.DataFrame] | None) -> None:
    """The sweep of the selected runs, or of every run of the store from its catalog index
    (``store_table``: app.ui.store.cached_runs_table, called only when needed), with the grouped
    query of ``torchscope query`` (median step time ... by config keys)."""
    _render_sweep_picker()
    scope = st.radio("Runs in the sweep", ["selected runs", "every run in the store"], horizontal=True,
                     key="compare_sweep_scope")
    if scope == "selected runs" or store_table is None:
        table, varying = compute_sweep_table(selected)
    else:
        table, varying = sweep_table(store_table())
    if len(table) < 2:
        st.info("A sweep needs at least two runs.")
        return
    _render_grouped(table, varying, store_table)
    outcomes = [o for o in SWEEP_OUTCOMES if o in table.columns and table[o].notna().any()]
    numeric_axes = [c for c in varying if pd.api.types.is_numeric_dtype(table[c])]
    # Human names and one unit per quantity (ms, MiB) for the charts and the table alike.
    table, names = display_table(table, [*varying, *SWEEP_OUTCOMES])
    outcomes = [names.get(o, o) for o in outcomes]
    numeric_axes = [names.get(c, c) for c in numeric_axes]
    if not numeric_axes:
        st.info("No numeric hyperparameter varies across these runs (config keys logged by the agent).")
    c1, c2 = st.columns(2)
    colour = c1.selectbox("Colour by", outcomes or ["(none)"], key="compare_sweep_colour")
    if numeric_axes and outcomes:
        st.plotly_chart(make_parallel_coordinates_figure(table, numeric_axes + outcomes, colour), width="stretch",
                        key="compare_parcoords")
        x = c2.selectbox("Hyperparameter", numeric_axes, key="compare_sweep_x")
        event = st.plotly_chart(make_param_scatter_figure(table, x, colour), width="stretch", key="compare_scatter",
                                on_select="rerun", selection_mode="points")
        points = (event or {}).get("selection", {}).get("points", []) if isinstance(event, dict) else \
            getattr(getattr(event, "selection", None), "points", [])
        if points:
            run_id = str(points[0].get("customdata"))
            if st.button(f"Open run {run_id}", key="compare_open_run"):
                st.switch_page(RUN_PAGE, query_params={"run": run_id})
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        names.get("final_loss", "final loss"): st.column_config.NumberColumn(
            "final loss (median of last 10 %)", format="%.4g",
            help="median of the last 10 % (1-20) of rank 0's loss values, as everywhere (docs/app.md, "
                 "\"Final values\")"),
        names.get("median_step_time_s", "median step time (ms)"): st.column_config.NumberColumn(
            "step time (median, steady state) (ms)", format="%.2f"),
        names.get("peak_memory_bytes", "peak memory (MiB)"): st.column_config.NumberColumn(format="%.1f"),
        "path": None})


def _render_grouped(table: pd.DataFrame, varying: list[str], store_table: Callable[[], pd.DataFrame] | None) -> None:
    """Median step time, throughput, memory and final loss of these runs by the chosen config keys:
    the query of ``torchscope query --by`` (DuckDB over the catalog index), the same numbers."""
    keys = st.multiselect("Median by config keys", [c.removeprefix("config.") for c in varying],
                          key="compare_sweep_by", help="the same query as `torchscope query --by KEYS`")
    if not keys or store_table is None:
        return
    try:
        runs = store_table()
        result = query_runs(runs[runs["id"].isin(set(table["id"]))], by=keys)
    except TorchscopeError as e:
        st.error(str(e))
        return
    st.dataframe(result, hide_index=True, width="stretch")


def _render_sweep_picker() -> None:
    """A link to each stored sweep's own view (torchscope sweep), when the store has any."""
    try:
        ids = list_sweep_ids(store_root())
    except TorchscopeError:
        return
    if not ids:
        return
    c1, c2 = st.columns([3, 1])
    sid = c1.selectbox("Sweeps run by torchscope sweep", ids, key="compare_sweep_id")
    if c2.button("Open sweep", key="compare_open_sweep"):
        st.query_params.clear()
        st.query_params["sweep"] = sid
        st.rerun()


def render_stored_sweep(sid: str) -> None:
    """The view of stored sweep ``sid``: counts, the best trial with a link to its run, the trials
    in parallel coordinates, the objective against each parameter, Optuna's parameter importance
    and the trials table."""
    try:
        view = load_sweep_view(store_root(), sid)
    except TorchscopeError as e:
        st.error(str(e))
        return
    spec, trials = view.state.spec, view.trials
    st.title(f"Sweep {view.state.id}")
    st.caption(f"{spec.method} search, {spec.trials} trials planned, objective: {spec.reduce} {spec.objective} "
               f"({spec.direction}) · {view.state.state} · " + ", ".join(f"{n} {k}" for k, n in trials.counts.items()))
    st.code(" ".join(spec.command), language="bash")
    _render_best(view)
    table = trials.table
    if trials.numeric_params and table["objective"].notna().any():
        st.plotly_chart(make_sweep_parallel_coordinates_figure(
            table, trials.numeric_params, "objective", log_params=trials.log_params, objective_label=spec.objective),
            width="stretch", key="sweep_parcoords")
        st.subheader(f"{spec.objective} against each parameter")
        cols = st.columns(min(3, len(trials.numeric_params)))
        for i, p in enumerate(trials.numeric_params):
            with cols[i % len(cols)]:
                st.plotly_chart(make_sweep_objective_figure(table, p, "objective", log_range=trials.log_params.get(p),
                                                            objective_label=spec.objective),
                                width="stretch", key=f"sweep_scatter_{p}")
    else:
        st.info("No trial has both numeric parameters and an objective yet: nothing to chart.")
    st.subheader("Parameter importance")
    if view.importance:
        st.dataframe({"parameter": list(view.importance), "importance": list(view.importance.values())},
                     hide_index=True, column_config={"importance": st.column_config.ProgressColumn(
                         "importance (Optuna, fANOVA)", min_value=0.0, max_value=1.0, format="%.2f")})
    else:
        st.info(f"Parameter importance is {view.importance_note}.")
    st.subheader("Trials")
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        "objective": st.column_config.NumberColumn(spec.objective, format="%.6g"),
        "duration_s": st.column_config.NumberColumn("duration (s)", format="%.2f"),
        "is_best": st.column_config.CheckboxColumn("best")})


def _render_best(view: SweepView) -> None:
    best = view.trials.best
    if best is None:
        st.warning("No trial has completed with an objective yet.")
        return
    params = ", ".join(f"{p.removeprefix('param.')}={best[p]}" for p in view.trials.params)
    st.success(f"Best trial {best['trial']}: {view.state.spec.objective} = {best['objective']:.6g} ({params})")
    if best.get("id"):
        st.page_link(RUN_PAGE, label=f"Open the best trial's run {best['id']}", icon=":material/monitoring:",
                     query_params={"run": str(best["id"])})
