"""The Run page's pieces: run picker, header, rank selector and the tab strip (UI layer)."""

from __future__ import annotations

import datetime
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from app.data import runs as runs_data
from app.presentation.units import format_seconds
from app.ui.cache import cached_run
from app.ui.layout import md_escape, md_message, record_hint
from app.ui.prefetch import prefetch_tabs
from app.ui.store import cached_store_view
from app.ui.tabs import RunContext, Tab
from app.workspace.refs import resolve_store_run
from app.workspace.signatures import run_signature
from profiler_agent import runformat as rf

__all__ = ["RUN_TAB_SPECS", "TAB_PARAM", "TabSpec", "build_context", "render_rank_selector",
           "render_run_header", "render_run_picker", "render_tabs"]


@dataclass(frozen=True)
class TabSpec:
    """A Run page tab by its label and its module's name under ``app.ui.tabs``: the strip needs
    every label, but only the open tab's module is imported (a first visit does not pay for the
    advisor, the timeline or the graph); ``TITLE`` of the module equals ``title`` (tested).
    ``prefetch``: the module has a ``prefetch(ctx)`` that loads its data in the background once
    another tab is built (``app.ui.prefetch``)."""

    title: str
    module: str
    prefetch: bool = False

    def load(self) -> Tab:
        """The tab module (imported on first use; an ImportError for a missing one)."""
        module: Tab = importlib.import_module(f"app.ui.tabs.{self.module}")  # a module satisfies Tab
        return module


# The Run page's tabs, in the order shown.
RUN_TAB_SPECS: tuple[TabSpec, ...] = (
    TabSpec("Overview", "overview"), TabSpec("Findings", "findings", prefetch=True), TabSpec("Metrics", "metrics"),
    TabSpec("Operators", "operators"), TabSpec("Kernels", "kernels"), TabSpec("Timeline", "timeline"),
    TabSpec("Memory", "memory", prefetch=True), TabSpec("Graph", "graph"), TabSpec("System", "system"), TabSpec("Logs", "logs"),
    TabSpec("Config", "config"),
)


def __getattr__(name: str) -> tuple[Tab, ...]:
    # RUN_TABS, the tab modules themselves, is imported on demand (tests, tools): the page never needs all.
    if name == "RUN_TABS":
        return tuple(spec.load() for spec in RUN_TAB_SPECS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def render_run_picker(root: Path) -> Path | None:
    """Pick a run of the store, starting from the ``run`` query parameter; keep the URL in step.

    Returns the chosen run folder, or None (after explaining why) when there is none.
    """
    try:
        view = cached_store_view(root)
    except rf.RunStoreNotFoundError:
        st.info(f"No run store at `{root}` yet. " + record_hint(root))
        return None
    table = view.store.table
    wanted = st.query_params.get("run")
    if table.empty:
        st.info(f"The run store `{root}` has no runs yet. " + record_hint(root))
        return None
    ids = list(table["id"])
    labels = {i: f"{n} · {s} · {i}" for i, n, s in zip(table["id"], table["name"], table["status"])}
    paths = dict(zip(table["id"], table["path"]))
    # The URL wins only when it changed since this page last wrote it (a link was followed);
    # otherwise the picker's own choice stands.
    if wanted and wanted != st.session_state.get("run_url_seen"):
        st.session_state["run_url_seen"] = wanted
        if wanted not in ids:
            try:  # a name, a unique prefix, or a run folder of the store that the catalog did not list
                found = resolve_store_run(wanted, root)
                manifest = rf.read_manifest(found)  # raises why an unlisted folder is not a run
                if found.name not in ids:
                    st.session_state["run_extra"] = (found.name, str(found), f"{manifest.name} · {found}")
                wanted = found.name
            except rf.TorchscopeError as e:
                st.warning(f"Run from the URL: {md_message(str(e))}")
                wanted = None
        if wanted:
            st.session_state["run_picker"] = wanted
    extra = st.session_state.get("run_extra")
    if extra and extra[0] not in ids:
        ids.append(extra[0])
        paths[extra[0]] = extra[1]
        labels[extra[0]] = extra[2]
    if st.session_state.get("run_picker") not in ids:
        st.session_state["run_picker"] = ids[0]
    chosen = st.selectbox("Run", ids, key="run_picker", format_func=lambda i: labels.get(i, i))
    if st.query_params.get("run") != chosen:
        st.query_params["run"] = chosen
        st.session_state["run_url_seen"] = chosen
    return Path(paths[chosen])


def render_run_header(run: runs_data.RunData) -> None:
    m = run.manifest
    status = str(run.status)
    marker = runs_data.STATUS_MARKERS.get(status, "")
    st.title(md_escape(m.name))  # names are user text: shown literally, never as Markdown
    bits = [f"{marker}**{status}**", f"`{m.id}`"]
    if m.started_at:
        started = datetime.datetime.fromtimestamp(m.started_at, tz=datetime.UTC)
        bits.append(started.strftime("started %Y-%m-%d %H:%M:%S UTC"))
    if m.duration_s is not None:
        bits.append(f"ran {format_seconds(m.duration_s)}")
    if m.tags:
        bits.append("tags: " + ", ".join(md_escape(t) for t in m.tags))
    st.markdown(" · ".join(bits))
    if status == rf.RunStatus.CRASHED:
        st.warning(
            "This run stopped sending heartbeats and its process is gone: it crashed. "
            "Everything it wrote until then is shown below."
        )
    if run.problems:
        with st.expander(f"⚠️ {len(run.problems)} line(s) of this run's files were skipped"):
            st.warning("\n".join(f"- {p}" for p in run.problems[:100]))


def render_rank_selector(ranks: list[int]) -> int | None:
    """A rank picker when the run has several ranks; None means all ranks / the only one."""
    if len(ranks) < 2:
        return None
    options = ["all", *ranks]
    if st.session_state.get("run_rank") not in options:  # another run with other ranks was shown
        st.session_state.pop("run_rank", None)
    choice = st.selectbox(
        "Rank",
        options,
        key="run_rank",
        help="Charts and tables show this rank; 'all' shows every rank where it makes sense.",
    )
    return None if choice is None or choice == "all" else int(str(choice))


def build_context(run_dir: Path, root: Path, rank: int | None) -> RunContext:
    run = cached_run(run_dir)
    return RunContext(
        run_dir=run_dir,
        run=run,
        rank=rank,
        key_prefix="run_",
        ranks=tuple(runs_data.run_ranks(run)),
        root=root,
        live=run.status == rf.RunStatus.RUNNING,
    )


# The open tab's label is kept in the URL under this name (``?run=…&run_tab=Timeline``), so a
# link opens that tab; the first tab leaves it out.
TAB_PARAM = "run_tab"


def render_tabs(ctx: RunContext, tabs: Sequence[TabSpec] = RUN_TAB_SPECS) -> Tab:
    """The tab strip of ``tabs`` (RUN_TAB_SPECS by default) with only the open tab built.

    Streamlit builds every ``st.tabs`` panel on every run unless the tabs track their state; here
    they do (bound to the ``run_tab`` query parameter), so a visit builds one tab and a tab switch
    reruns the page for the newly opened one only; only that tab's module is imported. A project
    error in that tab is shown inside it. Then the other tabs marked ``prefetch`` start loading
    their data in the background (``app.ui.prefetch``). Returns the tab module that was built.
    """
    containers = st.tabs([t.title for t in tabs], key=TAB_PARAM, bind="query-params")
    built: Tab | None = None
    closed: list[TabSpec] = []
    for container, spec in zip(containers, tabs, strict=True):
        if container.open is False:  # None would mean "not tracked": then build it, as before
            closed.append(spec)
            continue
        built = spec.load()
        with container:
            try:
                built.render(ctx)
            except rf.TorchscopeError as e:
                st.error(str(e))
    later = [(s.module, s.load) for s in closed if s.prefetch]
    if built is not None and later:  # the run's signature (a stat per trace file) only when needed
        prefetch_tabs(ctx, later, run_signature(ctx.run_dir))
    return built if built is not None else tabs[0].load()
