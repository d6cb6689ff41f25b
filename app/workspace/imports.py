"""Traces and log folders turned into runs of a store: ``torchscope import`` (workspace layer; the importers are app.data.log_import)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.data.log_import import import_log_plan, plan_log_import
from app.data.trace_files import Skipped
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["ImportResult", "import_into_store"]


@dataclass(frozen=True)
class ImportResult:
    """The store the runs went into, each created run with its manifest, and what was left out."""

    root: Path
    created: tuple[tuple[Path, rf.Manifest], ...]
    skipped: tuple[Skipped, ...]


def import_into_store(source: str | os.PathLike[str], name: str | None,
                      root: str | os.PathLike[str] | None) -> ImportResult:
    """Import ``source`` (a trace file, folder of traces, torch-tb-profiler or TensorBoard log
    folder) into the store ``root`` (default $TORCHSCOPE_RUNS or ./runs).

    Raises UsageError when nothing in ``source`` can be imported, naming why.
    """
    store = layout.resolve_root(root)
    plan = plan_log_import(source, name)
    created = import_log_plan(plan, store)
    return ImportResult(root=store, created=tuple((p, rf.read_manifest(p)) for p in created),
                        skipped=tuple(plan.skipped))
