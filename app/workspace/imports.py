"""Traces and log folders turned into runs of a store: ``torchscope import`` (workspace layer; the importers are app.data.log_import).

Importing a source again updates the run made from it the first time (same id and folder, the
traces and metrics replaced), unless ``new=True`` (``torchscope import --new``) asks for another
run. A run's source is its manifest's ``extra.imported_from`` (the resolved path).

At import the run's traces are analysed once, so that the analysis cache inside the run
(``<run>/.cache``, app.data.trace_analysis_cache) holds its steps: the Runs list and
``torchscope ls`` read the steps and the step time from there (app.workspace.cached_steps) as
soon as the run is imported, instead of "in trace" and dashes. The manifest's
``extra.trace_summary`` keeps the same headline numbers (steps, median step time, peak memory of
the traces' memory events) should the cache be deleted.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.data.log_import import import_log_plan, plan_log_import
from app.data.trace_files import Skipped
from app.errors import TorchscopeError
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["ImportResult", "import_into_store", "find_imported_run", "SUMMARY_KEY"]

SUMMARY_KEY = "trace_summary"  # manifest extra: the headline numbers computed at import


@dataclass(frozen=True)
class ImportResult:
    """The store the runs went into, each created run with its manifest, what was left out, and
    the run folders that were updated in place (re-imported sources) rather than created."""

    root: Path
    created: tuple[tuple[Path, rf.Manifest], ...]
    skipped: tuple[Skipped, ...]
    updated: tuple[Path, ...] = ()


def find_imported_run(store: Path, source: Path) -> Path | None:
    """The run of ``store`` imported from ``source`` (its manifest's ``imported_from``), or None."""
    want = str(source.resolve())
    try:
        folders = sorted(d for d in store.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError:
        return None
    for d in folders:
        if not rf.is_run_dir(d):
            continue
        try:
            if rf.read_manifest(d).extra.get("imported_from") == want:
                return d
        except (rf.RunFormatError, OSError):
            continue
    return None


def import_into_store(source: str | os.PathLike[str], name: str | None,
                      root: str | os.PathLike[str] | None, *, new: bool = False,
                      summarize: bool = True) -> ImportResult:
    """Import ``source`` (a trace file, folder of traces, torch-tb-profiler or TensorBoard log
    folder) into the store ``root`` (default $TORCHSCOPE_RUNS or ./runs). A source imported before
    updates its run unless ``new``; every imported run gets its headline numbers (module docstring)
    unless ``summarize`` is False.

    Raises UsageError when nothing in ``source`` can be imported, naming why.
    """
    store = layout.resolve_root(root)
    plan = plan_log_import(source, name)
    previous = {} if new else {r.source.resolve(): find_imported_run(store, r.source) for r in plan.runs}
    created, updated = [], []
    for run_dir in import_log_plan(plan, store):
        src = Path(str(rf.read_manifest(run_dir).extra.get("imported_from", "")))
        old = previous.get(src)
        if old is not None and old != run_dir:
            run_dir = _replace_run(old, run_dir, keep_name=name is None)
            updated.append(run_dir)
        if summarize:
            _store_summary(run_dir)
        created.append(run_dir)
    return ImportResult(root=store, created=tuple((p, rf.read_manifest(p)) for p in created),
                        skipped=tuple(plan.skipped), updated=tuple(updated))


def _replace_run(old: Path, fresh: Path, *, keep_name: bool) -> Path:
    """Put the freshly imported run ``fresh`` in the place of ``old`` (same folder and id; the old
    name unless the user gave one); the old folder is removed only once the new one is in place."""
    manifest = rf.read_manifest(old)
    aside = old.with_name(f".{old.name}.replaced")
    os.replace(old, aside)
    try:
        os.replace(fresh, old)
    except OSError:
        os.replace(aside, old)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    name = manifest.name if keep_name else rf.read_manifest(old).name
    rf.update_manifest(old, id=manifest.id, name=name, notes=manifest.notes, tags=manifest.tags)  # the user's edits stay
    # The columnar cache moved with the traces but is keyed by their old paths: start clean.
    shutil.rmtree(old / layout.CACHE_DIR, ignore_errors=True)
    return old


def _store_summary(run_dir: Path) -> None:
    """Analyse the run's traces once (filling the analysis cache the catalog reads) and record the
    headline numbers in the manifest. A run without traces, or whose traces fail to analyse,
    keeps its import: the Run page then says what is wrong."""
    if not layout.list_trace_files(run_dir):
        return
    # The analysis (pandas, pyarrow) loads only when a run has traces: `torchscope import --help`
    # and a TensorBoard log import start without it.
    from app.workspace.traces import load_and_analyze

    try:
        _, analysis = load_and_analyze(run_dir)
    except (TorchscopeError, OSError, ValueError):
        return
    summary = trace_summary(analysis)
    rf.update_manifest(run_dir, lambda m: m.replace(extra={**m.extra, SUMMARY_KEY: summary}))


def trace_summary(analysis: Any) -> dict[str, Any]:
    """Steps (of the lowest rank), median step time (s, slowest rank per step) and the largest
    allocated peak of the traces' memory events (bytes, None when unknown)."""
    steps = analysis.steps
    out: dict[str, Any] = {"steps": 0, "step_time_s": None, "peak_memory_bytes": None}
    if len(steps):
        first = steps[steps["rank"] == steps["rank"].min()]
        per_step = steps.groupby("step")["duration_us"].max()
        out["steps"] = int(len(first))
        out["step_time_s"] = round(float(per_step.median()) / 1e6, 9)
    peaks = [v["peak_allocated_bytes"] for v in analysis.memory.values() if v.get("peak_allocated_bytes") is not None]
    out["peak_memory_bytes"] = int(max(peaks)) if peaks else None
    return out
