"""The Compare page's detail tabs for one baseline/candidate pair: time breakdown, operators,
kernels, memory, model, advisor (UI layer)."""
from __future__ import annotations

from enum import StrEnum

import pandas as pd
import streamlit as st

from app.analysis.compare.comparison import Comparison
from app.analysis.compare.side import CompareSide
from app.analysis.model.graph_diff import diff_backward_graphs, diff_module_trees
from app.charts.compare import make_delta_bar_figure
from app.charts.compare_vega import step_time_chart, waterfall_chart
from app.charts.graph import make_module_diff_dot
from app.presentation.report import breakdown_display_table
from app.ui.cache import cached_figure
from app.ui.compare_memory import render_memory_tab  # the Memory tab lives in its own module
from app.ui.layout import md_message
from app.workspace.artifacts import UnsafePath, read_run_text

__all__ = ["render_time_tab", "render_ops_tab", "render_kernels_tab", "render_memory_tab", "render_model_tab",
           "render_advisor_tab", "diff_table_display", "DiffKind"]


class DiffKind(StrEnum):
    """Which diff table a Compare tab shows."""

    OPS = "ops"
    KERNELS = "kernels"

# Operator and kernel diff tables: (header without unit, help) of each time column (µs per profiled
# step in the analysis tables). Shown in ms when any value reaches 1 ms, as on the Run page.
_TIME_HEADERS = {
    "baseline_self_us": ("Baseline self", "host self time per profiled step in the baseline (child ops excluded)"),
    "candidate_self_us": ("Candidate self", "host self time per profiled step in the candidate"),
    "delta_us": ("Δ self", "candidate − baseline host self time per step; negative = faster"),
    "baseline_total_us": ("Baseline total", "time per step including child ops, baseline"),
    "candidate_total_us": ("Candidate total", "time per step including child ops, candidate"),
    "baseline_device_self_us": ("Baseline device", "GPU kernel time the op launched, per step, baseline"),
    "candidate_device_self_us": ("Candidate device", "GPU kernel time the op launched, per step, candidate"),
    "device_delta_us": ("Δ device", "candidate − baseline device time per step; negative = faster"),
    "baseline_us": ("Baseline", "kernel time per profiled step in the baseline"),
    "candidate_us": ("Candidate", "kernel time per profiled step in the candidate"),
    "baseline_spread_us": ("± baseline", "step-to-step spread (standard deviation over the profiled steps) "
                                         "of this row's time per step in the baseline"),
    "candidate_spread_us": ("± candidate", "step-to-step spread of this row's time per step in the candidate"),
}
_KERNEL_DELTA = ("Δ time", "candidate − baseline kernel time per step; negative = faster")
_TEXT_HEADERS = {
    "module": ("Module", "qualified module name (`layer1.0.conv1`); empty = outside any module"),
    "input_shapes": ("Input shapes", None),
    "change": ("Change", "both: in both runs; added: only in the candidate; removed: only in the baseline"),
}
_CALLS_HEADERS = {"baseline_calls": "Baseline calls/step", "candidate_calls": "Candidate calls/step"}
# Shown left to right: what matters for "what changed" first (the deltas), calls and change last.
_ORDER = ("name", "module", "input_shapes", "delta_us", "baseline_self_us", "candidate_self_us", "baseline_us",
          "candidate_us", "device_delta_us", "baseline_device_self_us", "candidate_device_self_us",
          "baseline_spread_us", "candidate_spread_us", "baseline_total_us", "candidate_total_us",
          "baseline_calls", "candidate_calls", "change")


def diff_table_display(table: pd.DataFrame, kind: DiffKind) -> tuple[pd.DataFrame, dict[str, object], str]:
    """(table to show, its column_config, time unit) of an operator (``DiffKind.OPS``) or kernel
    (``DiffKind.KERNELS``) diff table. Time columns ``*_us`` become ``*_ms`` (values / 1000) when any of
    them reaches 1 ms, so headers, values and unit agree; other columns keep their names. The deltas
    come right after the name (and module or shapes), so they show without scrolling."""
    times = [c for c in table.columns if c in _TIME_HEADERS]
    values = table[times].apply(pd.to_numeric, errors="coerce").abs() if times else pd.DataFrame()
    in_ms = bool(times) and bool((values.max().max() or 0) >= 1000)
    unit = "ms" if in_ms else "µs"
    order = [c for c in _ORDER if c in table.columns]
    shown = table[order + [c for c in table.columns if c not in order]].copy()
    config: dict[str, object] = {
        "name": st.column_config.TextColumn("Operator" if kind == DiffKind.OPS else "Kernel", width="medium"),
    }
    for col in times:
        label, help_text = _KERNEL_DELTA if kind == DiffKind.KERNELS and col == "delta_us" else _TIME_HEADERS[col]
        target = col[: -len("_us")] + "_ms" if in_ms else col
        if in_ms:
            shown = shown.rename(columns={col: target})
            shown[target] = pd.to_numeric(shown[target], errors="coerce") / 1e3
        delta = col.endswith("delta_us")
        fmt = ("%+.3f" if delta else "%.3f") if in_ms else ("%+.1f" if delta else "%.1f")
        config[target] = st.column_config.NumberColumn(f"{label} ({unit}/step)", format=fmt, help=help_text)
    for col, (text_label, text_help) in _TEXT_HEADERS.items():
        if col in shown.columns:
            config[col] = st.column_config.TextColumn(text_label, help=text_help)
    for col, label in _CALLS_HEADERS.items():
        if col in shown.columns:
            config[col] = st.column_config.NumberColumn(label, format="%.2f", help="calls per profiled step")
    return shown, config, unit


def _labels(cmp: Comparison) -> tuple[str, str]:
    b, c = cmp.baseline.label, cmp.candidate.label
    return b, (c if c != b else f"{c} (candidate)")


def render_time_tab(cmp: Comparison) -> None:
    b, c = _labels(cmp)
    # Vega-Lite, not plotly: the first tab of a fresh browser then loads no plotly.js (app.charts.compare_vega)
    st.vega_lite_chart(cached_figure(cmp, "steps", lambda: step_time_chart({b: cmp.step_times[0],
                                                                          c: cmp.step_times[1]})),
                       width="stretch", key="compare_steps_fig")
    st.caption("Step set of the headline: the steady-state steps (filled; warm-up, profiled and evaluation steps "
               "hollow and left out). The dashed lines are each side's median, the numbers the headline compares.")
    note = getattr(cmp, "sign_note", "")
    if note:
        st.info(note, icon="ℹ️")
    if len(cmp.breakdown) == 0:
        st.info("The per-step breakdown needs profiler traces on both sides.")
        return
    view = st.radio("View", ["device", "phase"], horizontal=True, key="compare_view",
                    format_func=lambda v: {"device": "kernels / copies / CPU / data loading",
                                           "phase": "forward / backward / optimizer"}[v])
    st.vega_lite_chart(cached_figure(cmp, ("waterfall", view), lambda: waterfall_chart(
        cmp.breakdown, view=view, steps=cmp.breakdown_steps)), width="stretch", key="compare_waterfall")
    ms = st.column_config.NumberColumn(format="%.2f")
    st.dataframe(breakdown_display_table(cmp, view), hide_index=True, width="stretch",
                 column_config={"baseline (ms/step)": ms, "candidate (ms/step)": ms,
                                "Δ (ms/step)": st.column_config.NumberColumn(format="%+.2f"),
                                "Δ share of baseline step (%)": st.column_config.NumberColumn(
                                    format="%+.1f", help="the category's change as a share of the baseline's "
                                    "mean profiled step")})
    n_base, n_cand = cmp.breakdown_steps
    st.caption(f"Step set of the waterfall and the operator and kernel deltas: the typical profiled steps, {n_base} "
               f"(baseline) and {n_cand} (candidate), from the traces; means over them, not the median step time of the "
               "headline, which comes from the steady-state steps. Steps that ran an evaluation are left out (see "
               "the notes). 'unattributed'/'rest' is what the categories do not cover.")


def _filtered(table: pd.DataFrame, key: str) -> pd.DataFrame:
    c1, c2 = st.columns([2, 1])
    text = c1.text_input("Filter by name", key=f"{key}_filter")
    changes = c2.multiselect("Change", ["both", "added", "removed"], default=["both", "added", "removed"],
                             key=f"{key}_change")
    out = table[table["change"].isin(changes)]
    if text:
        out = out[out["name"].astype(str).str.contains(text, case=False, regex=False)]
    return out


def _filter_state(key: str) -> tuple[str, tuple[str, ...]]:
    """What _filtered(…, key) filtered by (the figure of the filtered table depends on it)."""
    return (str(st.session_state.get(f"{key}_filter", "")),
            tuple(st.session_state.get(f"{key}_change", ("both", "added", "removed"))))


def render_ops_tab(cmp: Comparison) -> None:
    if len(cmp.ops) == 0:
        st.info("Operator diffs need profiler traces on both sides.")
        return
    ops = _filtered(cmp.ops, "compare_ops")
    by_module = "module" in ops.columns
    if by_module and not (cmp.ops["module"].astype(str) != "").any():
        st.info("Neither side's traces have module scopes, so operators are matched by name only. Runs "
                "recorded with `torchscope run` from this version have them, and so do traces recorded with "
                "`torch.profiler.profile(with_stack=True)`.")
    chart = ops.assign(op=ops["module"].astype(str).replace("", "(outside modules)") + " · " + ops["name"].astype(str)
                       ) if by_module else ops
    st.plotly_chart(cached_figure(cmp, ("ops", _filter_state("compare_ops")), lambda: make_delta_bar_figure(
        chart, label_col="op" if by_module else "name", title="Operators: host self-time change per step")),
        width="stretch", key="compare_ops_fig")
    shown, config, unit = diff_table_display(ops, DiffKind.OPS)
    st.dataframe(shown, hide_index=True, width="stretch", column_config=config)
    st.caption(f"Times ({unit}) and calls are per profiled step (each side divided by its own number of steps), "
               "sorted by the size of Δ self. Match by name + input shapes or name + module in the settings above.")


def render_kernels_tab(cmp: Comparison) -> None:
    if len(cmp.kernels) == 0:
        st.info("No device kernels on either side (CPU-only traces, or no traces).")
        return
    kernels = _filtered(cmp.kernels, "compare_kernels")
    st.plotly_chart(cached_figure(cmp, ("kernels", _filter_state("compare_kernels")), lambda: make_delta_bar_figure(
        kernels, title="Kernels: time change per step")), width="stretch", key="compare_kernels_fig")
    shown, config, unit = diff_table_display(kernels, DiffKind.KERNELS)
    st.dataframe(shown, hide_index=True, width="stretch", column_config=config)
    st.caption(f"Times ({unit}) and calls are per profiled step (each side divided by its own number of steps), "
               "sorted by the size of Δ time.")


def _render_module_graph(cmp: Comparison) -> None:
    """Both module trees as one graph, each module coloured by its change."""
    union = diff_module_trees(cmp.baseline.module_tree, cmp.candidate.module_tree, include_same=True)
    dot, hidden = make_module_diff_dot(union)
    st.subheader("Module tree, changes highlighted")
    # Streamlit's own background colours, close to the graph's fills (no raw HTML needed)
    st.markdown(":green-background[added in the candidate] · :red-background[removed in the candidate] · "
                ":orange-background[changed: type, output shape, parameters or settings] · unchanged (white)")
    if hidden:
        st.caption(f"{len(union):,} modules: only the changed ones and their parents are drawn "
                   f"({hidden:,} summarised in grey).")
    st.graphviz_chart(dot, width="stretch")


def _graph_dot(side: CompareSide) -> str | None:
    """The side's backward graph (DOT text); None without one, or (after a warning) for a link out of its run."""
    run = side.run
    if run is None or run.graph_dot is None:
        return None
    try:
        return read_run_text(run.path, run.graph_dot)
    except (UnsafePath, OSError) as e:
        st.warning(md_message(str(e)))
        return None


def render_model_tab(cmp: Comparison) -> None:
    if len(cmp.modules) == 0:
        st.info("No module tree on either side (graph/modules.json is written by the agent).")
    else:
        root = cmp.modules.iloc[0]
        st.markdown(f"Parameters: **{int(root['baseline_params']):,}** → **{int(root['candidate_params']):,}** "
                    f"({int(root['params_delta']):+,})")
        changed = cmp.modules[cmp.modules["change"] != "same"]
        counts = changed["change"].value_counts().to_dict()
        st.caption(", ".join(f"{v} {k}" for k, v in counts.items()) or "Same structure.")
        st.dataframe(cmp.modules, hide_index=True, width="stretch")
        _render_module_graph(cmp)
    base_dot, cand_dot = _graph_dot(cmp.baseline), _graph_dot(cmp.candidate)
    if base_dot is not None and cand_dot is not None:
        graph = diff_backward_graphs(base_dot, cand_dot)
        st.subheader("Backward graph: autograd nodes whose count changed")
        if len(graph):
            st.dataframe(graph, hide_index=True, width="stretch")
        else:
            st.caption("Same autograd node types and counts.")


def render_advisor_tab(diff) -> None:  # noqa: ANN001 - advisor.FindingsDiff
    from app.analysis.compare.advice import findings_diff_rows  # the advisor loads with its tab only

    rows = findings_diff_rows(diff)
    c1, c2, c3 = st.columns(3)
    c1.metric("Resolved", len(diff.resolved))
    c2.metric("Remaining", len(diff.remaining))
    c3.metric("New", len(diff.new))
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    else:
        st.success("The advisor finds nothing to fix in either run.")
