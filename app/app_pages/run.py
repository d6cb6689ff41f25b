"""The Run page: one run's tabs (overview, operators, kernels, memory, system, logs, ...) (UI layer)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.ui.cache import cached_run
from app.ui.layout import store_root
from app.ui.run_view import (
    build_context,
    render_rank_selector,
    render_run_header,
    render_run_picker,
    render_tabs,
)
from profiler_agent import runformat as rf


def _body(run_dir: Path, root: Path) -> None:
    run = cached_run(run_dir)
    render_run_header(run)
    ctx = build_context(run_dir, root, None)
    rank = render_rank_selector(list(ctx.ranks))
    render_tabs(build_context(run_dir, root, rank) if rank is not None else ctx)


def main() -> None:
    root = store_root()
    try:
        run_dir = render_run_picker(root)
        if run_dir is None:
            return
        live = cached_run(run_dir).status == rf.RunStatus.RUNNING
        if live and st.toggle(
            "Auto-refresh",
            value=True,
            key="run_autorefresh",
            help="While the run is running, re-read its files every few seconds.",
        ):
            st.fragment(run_every=st.session_state.get("refresh_s", 5))(_body)(run_dir, root)
        else:
            _body(run_dir, root)
    except rf.TorchscopeError as e:
        st.error(str(e))


main()
