"""One side of a comparison as analysis receives it: a run's records or bare traces, already loaded (analysis layer).

The workspace (app.workspace.sides) resolves what the user named and builds a CompareSide; the
comparison, the step tables, the memory categories and the advisor diff read only its fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from app.analysis.compare.memory_categories import CategoryPeaks
from app.analysis.trace.summary import TraceAnalysis
from app.analysis.trace.windows import ProfiledWindow
from app.data.runs import RunData
from app.data.trace import TraceTables

__all__ = ["SideKind", "CompareSide"]


class SideKind(StrEnum):
    RUN = "run"
    TRACES = "traces"


@dataclass(frozen=True)
class CompareSide:
    """Everything a comparison reads about one side.

    ``analysis`` is the TraceAnalysis of ``traces`` (None when the side has no traces); ``traces``
    are its TraceTables (for shape grouping and memory timelines). ``problems`` are messages about
    data that could not be used (shown, never fatal). ``replicates`` are the runs of a group side
    (``run`` is the first of them, whose traces and tree the breakdown and the op tables use),
    empty for a single run. ``category_peaks`` are the per-category memory peaks of the run's
    memory timelines (None: none recorded, or ``category_peaks_error`` says why they are unusable).
    ``path`` names the side in documents; analysis never opens it.
    """

    label: str
    path: Path
    kind: SideKind
    run: RunData | None = None
    analysis: TraceAnalysis | None = None
    traces: tuple[TraceTables, ...] = ()
    # Any: the module tree is the JSON document of graph/modules.json, nested dicts of the agent's schema.
    module_tree: dict[str, Any] | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)
    replicates: tuple[RunData, ...] = ()
    category_peaks: CategoryPeaks | None = None
    category_peaks_error: str | None = None
    # The run's profiler windows (manifest profiler.windows): anomaly-window steps are not typical.
    windows: tuple[ProfiledWindow, ...] = ()

    @property
    def runs(self) -> tuple[RunData, ...]:
        """The runs of this side: the replicates of a group, else the one run (none for bare traces)."""
        return self.replicates or ((self.run,) if self.run is not None else ())

    @property
    def id(self) -> str:
        return self.run.manifest.id if self.run is not None else str(self.path)
