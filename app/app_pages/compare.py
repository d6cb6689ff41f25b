"""The Compare page: is the candidate faster, by how much, why, and at what cost (UI layer).

Baseline and candidates come from the ``runs=<baseline>,<candidate>,...`` query parameter (the
Runs page's Compare button) or the pickers; each is a run or a replicate group (``group:NAME``).
The headline on top (the quantity judged, ratio, interval, verdict, method, replicates, reasons,
and the step sets each part uses), then the verdict table, then one tab per question.
"""
from __future__ import annotations

import streamlit as st

from app.analysis.compare.comparison import Comparison
from app.errors import TorchscopeError
from app.ui.compare_cache import (
    SideRef,
    cached_findings_diff,
    cached_side_comparison,
    prefetch_side_comparison,
)
from app.ui.compare_many import render_config_tab, render_curves_tab, render_stored_sweep, render_sweep_tab
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
    if st.query_params.get("sweep"):  # a torchscope sweep's own view (?sweep=<id>)
        render_stored_sweep(st.query_params["sweep"])
        return
    st.title("Compare runs")
    selection = render_selection(root)
    if selection is None:
        return
    options = render_options()
    base = _ref(selection, selection.baseline, root)
    refs = [_ref(selection, c, root) for c in selection.candidates]
    # Without their op and kernel deltas (the costliest part, shown by two tabs only): those are
    # computed in the background once the page is drawn, or by their tab when it is opened first.
    with st.spinner("Comparing…"):
        comparisons = [cached_side_comparison(base, ref, options, op_tables=False) for ref in refs]
    render_verdicts(comparisons)
    pick = 0
    if len(comparisons) > 1:
        names = [c.candidate.label for c in comparisons]
        pick = st.selectbox("Candidate shown in detail", range(len(names)), format_func=lambda i: names[i],
                            key="compare_detail")
    detail = comparisons[pick]

    def whole() -> Comparison:  # the detail's comparison with its op and kernel deltas
        return cached_side_comparison(base, refs[pick], options)

    runs = _side_runs([detail.baseline] + [c.candidate for c in comparisons])
    # Only the open tab is built (the tabs track their state, bound to ?compare_tab=…): the
    # advisor's diff, the sweep's store scan and every figure wait until their tab is opened.
    renderers = {
        "Where the time went": lambda: render_time_tab(detail),
        "Operators": lambda: render_ops_tab(whole()),
        "Kernels": lambda: render_kernels_tab(whole()),
        "Memory": lambda: render_memory_tab(detail),
        "Model": lambda: render_model_tab(detail),
        "Curves": lambda: render_curves_tab(runs),
        "Config": lambda: render_config_tab(runs),
        # every run of the store comes from the catalog index (app.workspace.catalog_query), read when asked
        "Sweep": lambda: render_sweep_tab(runs, lambda: cached_runs_table(root)),
        "Advisor": lambda: _advisor(detail, export=False),
        "Export": lambda: _advisor(whole(), export=True),
    }
    for container, title in zip(st.tabs(_TABS, key="compare_tab", bind="query-params"), _TABS, strict=True):
        if container.open is not False:
            with container:
                renderers[title]()
    prefetch_side_comparison(base, refs[pick], options)


def _advisor(detail, *, export: bool) -> None:  # noqa: ANN001 - a Comparison
    """The Advisor tab (findings resolved, remaining, new) or the Export tab (which lists them)."""
    try:
        advice = cached_findings_diff(detail.baseline.path, detail.candidate.path)
    except TorchscopeError as e:
        if export:
            render_exports(detail, [])
        else:
            st.warning(f"The advisor could not run: {e}")
        return
    if export:
        from app.analysis.compare.advice import findings_diff_rows  # the advisor loads with its tab only

        render_exports(detail, findings_diff_rows(advice))
    else:
        render_advisor_tab(advice)


def main() -> None:
    try:
        _body()
    except TorchscopeError as e:
        st.error(str(e))


main()
