"""The Run page's tabs and the contract each tab module keeps (UI layer).

A tab is a module ``app/ui/tabs/<name>.py`` exposing::

    TITLE: str                               # the label shown on the tab
    def render(ctx: RunContext) -> None: ... # Streamlit calls only; loads through app.ui.cache
    def prefetch(ctx: RunContext) -> None: ... # optional: fills render's caches, no Streamlit call;
                                             # run in the background while another tab is open when
                                             # its RUN_TAB_SPECS entry says prefetch=True (app.ui.prefetch)

The Run page (``app.ui.run_view.RUN_TAB_SPECS``) lists the tabs by label and module name in
that order; ``run_view.RUN_TABS`` imports them all, so a renamed or missing tab is an ImportError
at test time, never a silently absent tab. Only the open tab's module is imported and only its
``render`` runs (``run_view.render_tabs``; the open tab is the ``run_tab`` query parameter), so a
tab pays for its imports and loads only when the user opens it; adding a tab is one module and
one entry in ``RUN_TAB_SPECS``. A ``TorchscopeError`` raised by a tab's ``render`` is shown as ``st.error`` inside that tab
only, so one broken tab never breaks the page. A tab with no data for the run shows ``st.info``
saying how to record it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.data.runs import RunData

__all__ = ["RunContext", "Tab"]


@dataclass(frozen=True)
class RunContext:
    """What every tab receives from the Run page.

    ``run_dir`` is the run folder; ``run`` its data from ``app.ui.cache.cached_run``; ``rank``
    the rank chosen in the rank selector (None when the run has a single rank or none is
    chosen: a tab then shows rank 0 or all ranks, as it sees fit); ``ranks`` every rank seen in
    the run's metrics and traces; ``key_prefix`` prefixes every widget key of a tab
    (use :meth:`key`); ``root`` is the run store; ``live`` is True while the run is running.
    """

    run_dir: Path
    run: RunData
    rank: int | None = None
    key_prefix: str = "run_"
    ranks: tuple[int, ...] = ()
    root: Path | None = None
    live: bool = False

    def key(self, name: str) -> str:
        """A widget key unique to this run page and tab: ``<key_prefix><name>``."""
        return f"{self.key_prefix}{name}"


class Tab(Protocol):
    """What a tab module provides (a module satisfies this protocol)."""

    TITLE: str

    def render(self, ctx: RunContext) -> None: ...
