"""The Run page's per-rank section: straggler sentence and per-rank table (UI layer).

Shown under the Overview tab when the run's traces hold two ranks or more. The numbers come
from the run's cached StepAnalysis (``rank_summary``), formatted by app.presentation.ranks_text.
"""
from __future__ import annotations

import streamlit as st

from app.analysis.trace.ranks import find_straggler
from app.presentation.ranks_text import rank_display_table, straggler_sentence
from app.ui.cache import cached_step_analysis
from app.ui.tabs import RunContext

__all__ = ["render_rank_section"]

_HELP = ("Per rank, per step: compute (device kernels and copies, or host ops in a CPU-only trace), "
         "communication, their overlap, data loading and host work. The straggler score (0–1) is how "
         "often and by how much the rank is the last to arrive at each collective (each step boundary "
         "when the traces hold no collective), measured on each rank's own clock so that clock offsets "
         "between ranks do not matter. See docs/trace-engine.md, \"Ranks and stragglers\".")


def render_rank_section(ctx: RunContext) -> None:
    """The straggler sentence and the per-rank table; nothing for a run with fewer than two ranks."""
    if not ctx.run.trace_files:
        return
    rows = cached_step_analysis(ctx.run_dir).rank_summary
    if len(rows) < 2:
        return
    st.subheader("Ranks", help=_HELP)
    sentence = straggler_sentence(rows)
    if sentence:
        (st.warning if find_straggler(rows) is not None else st.info)(sentence)
    st.dataframe(
        rank_display_table(rows),
        hide_index=True,
        width="stretch",
        key=ctx.key("overview_ranks"),
        column_config={"Straggler score": st.column_config.ProgressColumn(
            "Straggler score", min_value=0.0, max_value=1.0, format="%.2f",
            help="0: never the last to arrive; 1: the last at every collective, by the whole spread")},
    )
