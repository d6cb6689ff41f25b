"""The Compare page: is the candidate faster, by how much, why, and at what cost (UI layer).

Baseline and candidates come from the ``runs=<baseline>,<candidate>,...`` query parameter (the
Runs page's Compare button) or the pickers; each is a run or a replicate group (``group:NAME``).
The headline on top (the quantity judged, ratio, interval, verdict, method, replicates, reasons,
and the step sets each part uses), then the verdict table, then one tab per question.
"""
from __future__ import annotations

import streamlit as st

from app.analysis.compare.advice import findings_diff_rows
from app.errors import TorchscopeError
from app.ui.compare_cache import SideRef, cached_findings_diff, cached_side_comparison
from app.ui.compare_many import render_config_tab, render_curves_tab, render_sweep_tab
from app.ui.compare_tabs import (
    render_advisor_tab,
    render_kernels_tab,
    render_memory_tab,
    render_model_tab,
    render_ops_tab,
    render_time_tab,
)
from app.ui.compare_view import render_exports, render_options, render_selection, render_verdicts
from app.ui.layout import store_root
from app.ui.store import cached_runs_table

_TABS = ["Where the time went", "Operators", "Kernels", "Memory", "Model", "Curves", "Config", "Sweep", "Advisor",
         "Export"]


def _ref(selection, key: str, root) -> SideRef:  # noqa: ANN001 - a compare_view.Selection
    """A picker key as a side: a run folder, or a group with its runs."""
    name = selection.group_name(key)
    if name is not None:
        return ("group", name, str(root), tuple(str(p) for p in selection.groups[key]))
    return ("run", str(selection.paths[key]))


def _side_runs(sides) -> list:  # noqa: ANN001 - CompareSides; RunData out
    """The runs of the sides, a group's every replicate, each once (Curves, Config and Sweep tabs)."""
    out, seen = [], set()
    for side in sides:
        for run in (getattr(side, "replicates", ()) or ()) or (side.run,):
            if run is not None and str(run.path) not in seen:
                seen.add(str(run.path))
                out.append(run)
    return out


def _body() -> None:
    root = store_root()
    st.title("Compare runs")
    selection = render_selection(root)
    if selection is None:
        return
    options = render_options()
    base = _ref(selection, selection.baseline, root)
    with st.spinner("Comparing…"):
        comparisons = [cached_side_comparison(base, _ref(selection, c, root), options) for c in selection.candidates]
    render_verdicts(comparisons)
    detail = comparisons[0]
    if len(comparisons) > 1:
        names = [c.candidate.label for c in comparisons]
        pick = st.selectbox("Candidate shown in detail", range(len(names)), format_func=lambda i: names[i],
                            key="compare_detail")
        detail = comparisons[pick]
    runs = _side_runs([detail.baseline] + [c.candidate for c in comparisons])
    advice, advice_error = None, ""
    try:
        advice = cached_findings_diff(detail.baseline.path, detail.candidate.path)
    except TorchscopeError as e:
        advice_error = str(e)
    tabs = st.tabs(_TABS)
    with tabs[0]:
        render_time_tab(detail)
    with tabs[1]:
        render_ops_tab(detail)
    with tabs[2]:
        render_kernels_tab(detail)
    with tabs[3]:
        render_memory_tab(detail)
    with tabs[4]:
        render_model_tab(detail)
    with tabs[5]:
        render_curves_tab(runs)
    with tabs[6]:
        render_config_tab(runs)
    with tabs[7]:
        # every run of the store comes from the catalog index (app.workspace.catalog_query), read when asked
        render_sweep_tab(runs, lambda: cached_runs_table(root))
    with tabs[8]:
        if advice is not None:
            render_advisor_tab(advice)
        else:
            st.warning(f"The advisor could not run: {advice_error}")
    with tabs[9]:
        render_exports(detail, findings_diff_rows(advice) if advice is not None else [])


def main() -> None:
    try:
        _body()
    except TorchscopeError as e:
        st.error(str(e))


main()
