"""One side of a comparison, resolved and loaded once: a run, a replicate group or bare traces (workspace layer).

A side is what ``torchscope diff`` accepts as BASELINE or CANDIDATE: a run (folder, id or
unique name prefix), a trace file, a folder of traces, or a torch-tb-profiler log folder holding
exactly one run (app.workspace.refs resolves it). A log folder of several runs or a run store is
refused, as ``torchscope analyze`` refuses it: a side is one run, never several pooled together.
The result is the analysis layer's typed input, app.analysis.compare.side.CompareSide.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.analysis.compare.side import CompareSide, SideKind
from app.analysis.trace.summary import TraceAnalysis
from app.analysis.trace.windows import ProfiledWindow
from app.data.runs import RunData, load_module_tree, load_run
from app.data.trace import TraceTables
from app.errors import TraceError, UsageError
from app.workspace import refs
from app.workspace.memory import try_load_category_peaks
from app.workspace.profiled_windows import manifest_windows
from app.workspace.traces import analyze_trace_set, load_and_analyze, load_trace_files
from profiler_agent import runformat as rf

__all__ = ["SideKind", "CompareSide", "TraceLoader", "load_side", "load_group_side", "load_runs_side", "group_of", "side_from_run",
           "assemble_run_side", "analyze_side_traces", "run_windows"]

# (run folder) -> (its traces, their analysis): the direct loader, or a front end's cached one.
TraceLoader = Callable[[Path], tuple[tuple[TraceTables, ...], TraceAnalysis]]


def analyze_side_traces(path: str | os.PathLike[str]) -> tuple[tuple[TraceTables, ...], TraceAnalysis]:
    """Load and analyse the traces under ``path``; return (traces, TraceAnalysis).

    Raises TraceError when a trace cannot be read and AnalysisError when it cannot be analysed.
    """
    return load_and_analyze(path)


def run_windows(run: RunData) -> tuple[ProfiledWindow, ...]:
    """The run's profiler windows with their reasons (the manifest's ``profiler.windows``)."""
    return manifest_windows(run.manifest)


def side_from_run(
    run: RunData,
    *,
    traces: tuple[TraceTables, ...] = (),
    analysis: TraceAnalysis | None = None,
    module_tree: dict[str, Any] | None = None,
    problems: tuple[str, ...] = (),
) -> CompareSide:
    """Wrap already-loaded data of a run as a side, with the category peaks of its memory timelines."""
    peaks, peaks_error = try_load_category_peaks(run.path)
    return CompareSide(
        label=run.manifest.name or run.manifest.id,
        path=run.path,
        kind=SideKind.RUN,
        run=run,
        analysis=analysis,
        traces=traces,
        module_tree=module_tree,
        problems=tuple(problems),
        category_peaks=peaks,
        category_peaks_error=peaks_error,
        windows=run_windows(run),
    )


def assemble_run_side(run: RunData, load_traces: TraceLoader | None) -> CompareSide:
    """A run as a side: its traces and analysis from ``load_traces(path)`` (None: metrics only),
    its module tree and memory category peaks. Unreadable traces or trees become problems; the
    metrics still allow a step-time verdict. The CLI passes the direct loader
    (:func:`analyze_side_traces`), the page its cached one (a named function of app.ui)."""
    problems: list[str] = list(run.problems)
    traces: tuple[TraceTables, ...] = ()
    analysis = None
    if load_traces is not None and run.trace_files:
        try:
            traces, analysis = load_traces(run.path)
        except TraceError as e:
            problems.append(f"traces not used: {e}")
    try:
        tree = load_module_tree(run.path)
    except rf.CorruptFileError as e:
        tree = None
        problems.append(str(e))
    return side_from_run(run, traces=traces, analysis=analysis, module_tree=tree, problems=tuple(problems))


def _load_run_side(path: Path, with_traces: bool) -> CompareSide:
    return assemble_run_side(load_run(path), analyze_side_traces if with_traces else None)


def _load_trace_files(files: list[Path]) -> tuple[tuple[TraceTables, ...], TraceAnalysis]:
    """Load and analyse ``files`` together (one run's ranks or workers), like analyze_side_traces."""
    traces = tuple(load_trace_files(files))
    return traces, analyze_trace_set(traces)


def load_side(
    ref: str | os.PathLike[str], root: str | os.PathLike[str] | None = None, *, with_traces: bool = True
) -> CompareSide:
    """Resolve ``ref`` (run folder, run id or name prefix, trace file, folder of traces, log folder
    of one run) and load it.

    Raises RunNotFoundError when ``ref`` is neither a path nor a run of the store, TraceError
    when bare traces cannot be read, UsageError when a folder holds no trace or several runs.
    """
    found = refs.resolve_ref(ref, root)
    if found.kind is refs.RefKind.RUN:
        return _load_run_side(found.path, with_traces)
    path = found.path
    traces, analysis = _load_trace_files(refs.side_trace_files(path))
    name = path.name.split(".")[0] if found.kind is refs.RefKind.FILE else path.name
    return CompareSide(label=name or str(path), path=path, kind=SideKind.TRACES, analysis=analysis, traces=traces)


def group_of(manifest: rf.Manifest) -> str | None:
    """The run's group (``torchscope run --group NAME``): a typed ``group`` field when the
    schema has one, else the manifest's ``group`` kept in ``extra``; None when absent."""
    value = getattr(manifest, "group", None)
    if value is None and isinstance(manifest.extra, dict):
        value = manifest.extra.get("group")
    return str(value) if isinstance(value, str) and value else None


def load_group_side(group: str, root: str | os.PathLike[str] | None = None, *,
                    with_traces: bool = True) -> CompareSide:
    """The runs of the store whose manifest ``group`` is ``group``, as one side: ``replicates``
    in the store's order (by start time), the first run's traces, tree and label ``group``.

    Raises RunStoreNotFoundError when the store does not exist, UsageError naming the group and
    the groups that exist when no run has it."""
    listing = rf.list_runs(root)
    members = sorted(path for path, m in listing.runs if group_of(m) == group)  # folder names sort by time
    if not members:
        groups = sorted({g for _, m in listing.runs if (g := group_of(m))})
        have = f"groups in {listing.root}: {', '.join(groups)}" if groups else f"no run in {listing.root} has a group"
        raise UsageError(f"--group {group}: no run of this group ({have}; record with torchscope run --group NAME)")
    return load_runs_side(group, members, with_traces=with_traces)


def load_runs_side(label: str, members: Sequence[Path], *, with_traces: bool = True) -> CompareSide:
    """The runs ``members`` (at least one) as one side of replicates labelled ``label``: the first
    run's traces, tree and memory (``--group``, and ``diff --baseline-query``'s runs from the catalog)."""
    runs = tuple(load_run(p) for p in members)
    first = assemble_run_side(runs[0], analyze_side_traces if with_traces else None)
    problems = list(first.problems) + [f"{r.manifest.name or r.manifest.id}: {p}" for r in runs[1:] for p in r.problems]
    return CompareSide(label=label, path=first.path, kind=SideKind.RUN, run=runs[0], analysis=first.analysis,
                       traces=first.traces, module_tree=first.module_tree, problems=tuple(problems), replicates=runs,
                       category_peaks=first.category_peaks, category_peaks_error=first.category_peaks_error,
                       windows=first.windows)
