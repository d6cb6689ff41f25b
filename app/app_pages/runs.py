"""The Runs page: every run of the store from its catalog index, filtered and paginated, with open / compare / tag / archive (UI layer)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.ui.layout import store_root
from app.ui.runs_view import (
    page_arrow,
    page_display,
    render_empty_store,
    render_filters,
    render_pager,
    render_runs_table,
    render_selection_actions,
    render_store_problems,
)
from app.ui.store import cached_store_view
from app.ui.warmup import warm_run_page
from profiler_agent import runformat as rf


def _catalog(root: Path) -> None:
    try:
        view = cached_store_view(root)
    except rf.RunStoreNotFoundError:
        render_empty_store(root, missing=True)
        return
    except rf.TorchscopeError as e:
        st.error(str(e))
        return
    render_store_problems(view)
    table = view.store.table
    if table.empty:
        render_empty_store(root, missing=False)
        return
    matching = render_filters(view)  # newest start first
    first, end = render_pager(len(matching))
    page_note = f" · rows {first + 1}–{end}" if end - first < len(matching) else ""
    st.caption(f"{len(matching)} of {len(table)} runs in `{view.store.root}`{page_note}")
    shown = matching.iloc[first:end]
    display = page_display(view, matching, first, end)
    positions = render_runs_table(shown, display, page_arrow(view, display))
    selected = shown.iloc[positions] if positions else shown.iloc[:0]  # a take of no rows costs ~1 ms
    read_only = (
        set(table.loc[table["path"].str.startswith(str(view.mirror)), "path"]) if view.mirror else set()
    )
    try:
        render_selection_actions(selected, root, read_only=read_only)
    except rf.TorchscopeError as e:
        st.error(str(e))


def main() -> None:
    st.title("Runs")
    root = store_root()
    refresh_s = st.session_state.get("refresh_s", 5)
    if st.toggle(
        "Auto-refresh",
        key="runs_autorefresh",
        help=f"Re-read the store every {refresh_s} s, to follow runs while they are recorded.",
    ):
        st.fragment(run_every=refresh_s)(_catalog)(root)
    else:
        _catalog(root)
    warm_run_page()  # once per server: the Run page's modules and plotly's first figure, while the user reads


main()
