"""The Runs page's pieces: store messages, the runs table with selection, actions (UI layer)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import streamlit as st

from app.data import runs as runs_data
from app.ui.layout import COMPARE_PAGE, RUN_PAGE, md_escape, record_hint
from app.ui.store import StoreView, clear_store_caches
from app.workspace import stores
from app.workspace.store import archive_run, delete_run

__all__ = [
    "render_store_problems",
    "render_filters",
    "render_runs_table",
    "render_pager",
    "filter_view",
    "page_display",
    "PAGE_SIZES",
    "render_selection_actions",
    "display_table",
    "table_height",
]

# st.dataframe's row and header heights (px) at the default theme; the grid shows this many rows
# at most and scrolls beyond, so a long store does not push the actions off the screen.
_ROW_PX = 35
_MAX_VISIBLE_ROWS = 25
# Rows per page of the runs table: a store of 10,000 runs sends one page to the browser, not 10,000 rows.
PAGE_SIZES = (25, 50, 100, 200, 500)
_DEFAULT_PAGE_SIZE = 50

_COLUMN_CONFIG = {
    "status": st.column_config.TextColumn(
        "Status", help="● running, ✓ finished, ✗ failed or crashed, ■ killed, ✂ pruned by a sweep"
    ),
    "name": st.column_config.TextColumn("Name"),
    "tags": st.column_config.TextColumn("Tags"),
    "started_at": st.column_config.DatetimeColumn("Started (UTC)", format="YYYY-MM-DD HH:mm:ss"),
    "duration_s": st.column_config.NumberColumn("Duration (s)", format="%.1f"),
    "steps": st.column_config.NumberColumn("Steps", format="%d"),
    "group": st.column_config.TextColumn(
        "Group", help="replicate group (`torchscope run --group NAME`): runs of one configuration, compared "
        "together on the Compare page (pick `group NAME` as a side)"
    ),
    "final_loss": st.column_config.NumberColumn(
        "Final loss (median of last 10 %)",
        format="%.4g",
        help="the median of the last 10 % of rank 0's loss values (1 to 20 values), so one noisy batch does not "
        "decide; the same number as the Run page, `torchscope ls`, `torchscope analyze` and Compare. docs/app.md, "
        "\"Final values\"",
    ),
    "step_time_ms": st.column_config.NumberColumn(
        "Step time (median, steady state) (ms)",
        format="%.2f",
        help="median step time of the steady-state steps (slowest rank per step), the same number as the "
        "Run page's Overview, `torchscope ls` and Compare. Dropped: the first min(5, n/10) steps (warm-up: "
        "allocator growth, autotuning, first batch), steps inside profiler windows (slowed by the profiler) "
        "and steps that ran an evaluation (a val_* value logged). For runs without metrics.jsonl: the median "
        "of the traces' profiled steps, see Steps from. docs/app.md, \"Step time\"",
    ),
    "steps_source": st.column_config.TextColumn(
        "Steps from",
        help="metrics: the run's metrics.jsonl (every training step). trace: the run has no metrics.jsonl "
        "(an imported trace); Steps are its traces' profiled steps (lowest rank) and Step time their median "
        "(slowest rank per step, every profiled step), read from the trace analysis cache. in trace: the same, but the traces were not "
        "analysed yet; the list never parses traces: open the run once (or `torchscope analyze` it) "
        "and they fill in.",
    ),
    "samples_per_s": st.column_config.NumberColumn(
        "Samples/s",
        format="%.1f",
        help="median over the same steady-state steps of samples (all ranks) / step time, as Compare's "
        "throughput; empty when a kept step logged no samples",
    ),
    "peak_memory_mib": st.column_config.NumberColumn(
        "Peak memory (MiB)",
        format="%.1f",
        help="GPU runs: the GPU allocator's peak over the run (torch.cuda.max_memory_allocated, sampled). "
        "Other runs: host RSS, the largest sample of the process plus its DataLoader workers (it includes the "
        "interpreter and libraries). The list reads no traces; a run's Overview and the Compare page use the "
        "traces' tensor allocations instead of RSS when the run has them.",
    ),
    "device": st.column_config.TextColumn("Device"),
    "git_commit": st.column_config.TextColumn("Git commit"),
    "id": st.column_config.TextColumn("Run id"),
}


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The store table with display units (ms, MiB) and status markers, in display column order."""
    df = pd.DataFrame(index=table.index)
    df["status"] = [runs_data.STATUS_MARKERS.get(s, "") + s for s in table["status"]]
    df["name"] = table["name"]
    # The group column only when a run has one: most stores have none, and an empty column is noise.
    if "group" in table.columns and table["group"].notna().any() and (table["group"].astype(str) != "").any():
        df["group"] = table["group"]
    for col in ("tags", "started_at", "duration_s", "steps", "final_loss"):
        df[col] = table[col]
    df["step_time_ms"] = pd.to_numeric(table["step_time_s"], errors="coerce") * 1e3
    source = table["steps_source"] if "steps_source" in table.columns else pd.Series("", index=table.index)
    df["steps_source"] = source.fillna("").astype(str).replace("", None)
    df["samples_per_s"] = pd.to_numeric(table["samples_per_s"], errors="coerce")
    df["peak_memory_mib"] = pd.to_numeric(table["peak_memory_bytes"], errors="coerce") / 2**20
    for col in ("device", "git_commit", "id"):
        df[col] = table[col]
    df["steps"] = pd.to_numeric(df["steps"], errors="coerce").astype("Int64")
    df["final_loss"] = pd.to_numeric(df["final_loss"], errors="coerce")
    df["duration_s"] = pd.to_numeric(df["duration_s"], errors="coerce")
    return df.reset_index(drop=True)


def table_height(n_rows: int) -> int:
    """Pixel height of a grid that shows ``n_rows`` rows (at least 1, at most _MAX_VISIBLE_ROWS)
    plus the header, without an empty band below the last row."""
    visible = min(max(n_rows, 1), _MAX_VISIBLE_ROWS)
    return (visible + 1) * _ROW_PX + 3  # + the grid's borders


def render_store_problems(view: StoreView) -> None:
    problems = view.store.problems
    if view.mirror is not None:
        st.caption(
            "This folder holds torch-tb-profiler runs; they are listed read-only from a mirror in "
            f"`{view.mirror}` (symlinks to the original traces). Use `torchscope import` to make "
            "editable copies."
        )
    if problems:
        with st.expander(f"⚠️ {len(problems)} problem(s) in this store: some folders or lines were skipped"):
            st.warning("\n".join(f"- {p}" for p in problems[:200]))
            if len(problems) > 200:
                st.caption(f"… and {len(problems) - 200} more")


def filter_view(view: StoreView, text: str = "", statuses: list[str] | None = None, tags: list[str] | None = None,
                group: str | None = None) -> pd.DataFrame:
    """The view's rows that pass the filters, newest start first; remembered per view, so a rerun
    with the same filters (every click) costs nothing."""
    key = ("filter", text, tuple(statuses or ()), tuple(tags or ()), group or "")
    hit = view.memo.get(key)
    if isinstance(hit, pd.DataFrame):
        return hit
    out = runs_data.filter_store(view.store.table, text, statuses)
    if tags:
        wanted = set(tags)
        cells = out["tags"].fillna("").astype(str)
        out = out[[bool(wanted & {t.strip() for t in c.split(",")}) for c in cells]]
    if group:
        out = out[out["group"].astype(str) == group]
    if "started_at" in out.columns:
        # Newest start first: the store lists runs in folder (creation) order, and an imported
        # trace is created today but started when it was recorded.
        out = out.sort_values("started_at", ascending=False, kind="stable", na_position="last")
    if len(view.memo) > 32:
        view.memo.clear()
    view.memo[key] = out
    return out


def render_filters(view: StoreView) -> pd.DataFrame:
    """Text, status, tag and group filters over the view's catalog rows; return the rows that pass."""
    left, mid, right, far = st.columns([3, 2, 2, 2])
    text = left.text_input(
        "Filter", key="runs_filter", placeholder="words in name, tags, notes or config (lr=0.01)"
    )
    chosen = mid.multiselect("Status", list(view.statuses), key="runs_status_filter")
    tags = right.multiselect("Tags", list(view.tags), key="runs_tag_filter", disabled=not view.tags,
                             help="runs with any of these tags")
    group = far.selectbox("Group", ["(any)", *view.groups], key="runs_group_filter", disabled=not view.groups,
                          help="replicate group (`torchscope run --group NAME`)")
    return filter_view(view, text, chosen, tags, None if group == "(any)" else group)


def render_pager(n_rows: int) -> tuple[int, int]:
    """Page size and page number widgets (when there is more than one page); (first, end) positions."""
    size = int(st.session_state.get("runs_page_size", _DEFAULT_PAGE_SIZE))
    pages = max(1, -(-n_rows // size))
    if n_rows > PAGE_SIZES[0]:
        left, right = st.columns([1, 3])
        size = int(left.selectbox("Rows per page", PAGE_SIZES, index=PAGE_SIZES.index(_DEFAULT_PAGE_SIZE),
                                  key="runs_page_size"))
        pages = max(1, -(-n_rows // size))
        if pages > 1:
            if int(st.session_state.get("runs_page", 1) or 1) > pages:  # fewer pages after a filter
                st.session_state["runs_page"] = pages
            page = int(right.number_input(f"Page (of {pages})", min_value=1, max_value=pages, step=1,
                                          key="runs_page"))
        else:
            page = 1
    else:
        page = 1
    page = min(max(page, 1), pages)
    first = (page - 1) * size
    return first, min(first + size, n_rows)


def page_display(view: StoreView, rows: pd.DataFrame, first: int, end: int) -> pd.DataFrame:
    """:func:`display_table` of ``rows[first:end]`` (rows from :func:`filter_view`), remembered per view
    and page: a rerun (any click) re-sends the page without rebuilding it."""
    key = ("page", id(rows), first, end)
    hit = view.memo.get(key)
    if isinstance(hit, pd.DataFrame):
        return hit
    out = display_table(rows.iloc[first:end])
    view.memo[key] = out
    return out


def page_arrow(view: StoreView, shown: pd.DataFrame) -> pa.Table | pd.DataFrame:
    """``shown`` (a :func:`page_display`) as the Arrow table ``st.dataframe`` makes of it, remembered
    per view and page: every rerun would convert it again (~2 ms of a ~15 ms rerun). The frame
    itself when Arrow cannot take it as it is (st.dataframe then fixes its column types)."""
    key = ("arrow", id(shown))
    hit = view.memo.get(key)
    if isinstance(hit, tuple) and hit[0] is shown:
        return hit[1]
    try:
        table: pa.Table | pd.DataFrame = pa.Table.from_pandas(shown)  # what st.dataframe does with a frame
    except (pa.ArrowException, TypeError, ValueError):
        table = shown
    view.memo[key] = (shown, table)
    return table


def render_runs_table(table: pd.DataFrame, shown: pd.DataFrame | None = None,
                      data: pa.Table | pd.DataFrame | None = None) -> list[int]:
    """Show the table (``shown``: its display_table, when already made; ``data``: that as
    :func:`page_arrow` gives it); return positions (in ``table``) of the selected rows."""
    shown = display_table(table) if shown is None else shown
    event = st.dataframe(
        shown if data is None else data,
        key="runs_table",
        hide_index=True,
        on_select="rerun",
        selection_mode="multi-row",
        column_config=_COLUMN_CONFIG,
        width="stretch",
        height=table_height(len(shown)),
        placeholder="–",
    )
    rows = list(getattr(getattr(event, "selection", None), "rows", []) or [])
    return [r for r in rows if 0 <= r < len(table)]


def _open_buttons(selected: pd.DataFrame) -> None:
    ids = list(selected["id"])
    left, right = st.columns(2)
    if left.button("Open run", key="runs_open", disabled=len(ids) != 1, type="primary"):
        st.switch_page(RUN_PAGE, query_params={"run": ids[0]})
    if right.button(
        "Compare",
        key="runs_compare",
        disabled=len(ids) < 2,
        help="select two or more runs; the oldest is the baseline, the others candidates",
    ):
        oldest_first = list(selected.sort_values("started_at", kind="stable")["id"])
        st.switch_page(COMPARE_PAGE, query_params={"runs": ",".join(oldest_first)})


def _render_edit(row: pd.Series) -> None:
    # Keys carry the run id: another selected run gets fresh widgets showing its own values.
    run_id = row["id"]
    with st.form(key=f"runs_edit_form_{run_id}"):
        st.markdown(f"**Tags and notes of** `{run_id}`")
        tags = st.text_input(
            "Tags (comma-separated)", value=str(row["tags"] or ""), key=f"runs_edit_tags_{run_id}"
        )
        notes = st.text_area("Notes", value=str(row.get("notes") or ""), key=f"runs_edit_notes_{run_id}")
        url = stores.remote_url(row["path"])
        if url:
            st.caption(f"Saved into the store itself ({md_escape(url)}/{md_escape(run_id)}/run.json), for everyone.")
        if st.form_submit_button("Save"):
            stores.save_tags_and_notes(Path(row["path"]), tags.split(","), notes)
            clear_store_caches()
            st.success(f"Saved tags and notes of {md_escape(row['name'])}.")
            st.rerun()


def _render_archive(selected: pd.DataFrame, root: Path) -> None:
    n = len(selected)
    with st.expander(f"Archive or delete {n} run(s)"):
        action = st.radio(
            "Action",
            ["Archive", "Delete"],
            key="runs_remove_action",
            horizontal=True,
            help=f"Archive moves runs into {root / runs_data.ARCHIVE_DIR}; delete removes them for good.",
        )
        st.write(", ".join(f"`{i}`" for i in selected["id"]))
        # The confirmation belongs to this exact selection: selecting other runs asks again.
        digest = hashlib.sha1(",".join(sorted(selected["id"])).encode()).hexdigest()[:12]
        sure = st.checkbox(f"Yes, {action.lower()} these {n} run(s)", key=f"runs_remove_confirm_{digest}")
        if st.button(action, key="runs_remove", disabled=not sure):
            for path in selected["path"]:
                if action == "Archive":
                    archive_run(path, root)
                else:
                    delete_run(path)
            clear_store_caches()
            st.rerun()


def render_selection_actions(selected: pd.DataFrame, root: Path, *, read_only: set[str]) -> None:
    """Open / compare / edit / archive the selected runs. Runs in ``read_only`` (mirrored
    tb-profiler runs) can be opened and compared but not changed."""
    if selected.empty:
        st.caption(
            "Select runs in the table (click the left edge of a row) to open, compare, tag or archive them."
        )
        return
    _open_buttons(selected)
    editable = selected[~selected["path"].isin(read_only)]
    if len(editable) == 1:
        _render_edit(editable.iloc[0])
    url = stores.remote_url(root)
    if len(editable) and url:
        # Archive and delete would act on the local mirror only, and the next listing bring the runs back.
        st.caption(f"Archive and delete are not offered for a remote store ({md_escape(url)}): use the "
                   "storage's own tools.")
    elif len(editable):
        _render_archive(editable, root)
    if len(editable) < len(selected):
        st.caption("Runs mirrored from a tb-profiler folder are read-only here.")


def render_empty_store(root: Path, *, missing: bool) -> None:
    if missing:
        st.info(f"No run store at `{root}` yet. " + record_hint(root))
    else:
        st.info(f"The run store `{root}` has no runs yet. " + record_hint(root))
