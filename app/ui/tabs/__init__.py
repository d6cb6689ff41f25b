"""The Run page's tabs and the contract each tab module keeps (UI layer).

A tab is a module ``app/ui/tabs/<name>.py`` exposing::

    TITLE: str                               # the label shown on the tab
    def render(ctx: RunContext) -> None: ... # Streamlit calls only; loads through app.ui.cache

The Run page builds one :class:`RunContext`, then renders the tabs listed in :data:`TAB_MODULES`
in that order. A module that does not exist yet is skipped; a ``TorchscopeError`` raised by a
tab's ``render`` is shown as ``st.error`` inside that tab only, so one broken tab never breaks
the page. A tab with no data for the run shows ``st.info`` saying how to record it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from app.data.runs import RunData

__all__ = ["RunContext", "TAB_MODULES", "load_tab_modules"]

# Order of the tabs on the Run page.
TAB_MODULES: tuple[str, ...] = (
    "overview",
    "findings",
    "metrics",
    "operators",
    "kernels",
    "timeline",
    "memory",
    "graph",
    "system",
    "logs",
    "config",
)


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


def load_tab_modules(names: tuple[str, ...] = TAB_MODULES) -> list[tuple[str, ModuleType]]:
    """Import the tab modules that exist, in order; return (name, module) pairs.

    A module that is not there (not built yet) is skipped; any other import error propagates.
    """
    found: list[tuple[str, ModuleType]] = []
    for name in names:
        full = f"{__name__}.{name}"
        try:
            module = importlib.import_module(full)
        except ModuleNotFoundError as e:
            if e.name == full:
                continue
            raise
        if hasattr(module, "render") and hasattr(module, "TITLE"):
            found.append((name, module))
    return found
