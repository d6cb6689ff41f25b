"""One side of a comparison: a run or bare traces, loaded once (analysis layer, reads via app.data).

A side is what ``torchscope diff`` accepts as BASELINE or CANDIDATE: a run (folder, id or
unique name prefix, resolved with ``find_run``), a trace file, a folder of traces, or a
torch-tb-profiler log folder holding exactly one run; which files are traces is decided by
content (app.data.trace_files). A log folder of several runs or a run store is refused, as
``torchscope analyze`` refuses it: a side is one run, never several pooled together. The page
builds sides from its cached loaders instead.
"""
from __future__ import annotations

from collections.abc import Callable

import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from app.data import trace_files
from app.data.runs import RunData, load_module_tree, load_run
from app.errors import TraceError, UsageError
from profiler_agent import runformat as rf

__all__ = ["SideKind", "CompareSide", "load_side", "load_group_side", "group_of", "side_from_run", "assemble_run_side",
           "analyze_side_traces"]


class SideKind(StrEnum):
    RUN = "run"
    TRACES = "traces"


@dataclass(frozen=True)
class CompareSide:
    """Everything a comparison reads about one side.

    ``analysis`` is a ``TraceAnalysis`` (steps, ops, kernels, memory) or None when the side has
    no traces; ``traces`` are its ``TraceTables`` (for shape grouping and memory timelines).
    ``problems`` are messages about data that could not be used (shown, never fatal).
    ``replicates`` are the runs of a group side (``load_group_side``; ``run`` is the first of
    them, whose traces and tree the breakdown and the op tables use), empty for a single run.
    """

    label: str
    path: Path
    kind: SideKind
    run: RunData | None = None
    analysis: Any | None = None
    traces: tuple[Any, ...] = ()
    module_tree: dict[str, Any] | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)
    replicates: tuple[RunData, ...] = ()

    @property
    def runs(self) -> tuple[RunData, ...]:
        """The runs of this side: the replicates of a group, else the one run (none for bare traces)."""
        return self.replicates or ((self.run,) if self.run is not None else ())

    @property
    def id(self) -> str:
        return self.run.manifest.id if self.run is not None else str(self.path)


def analyze_side_traces(path: str | os.PathLike[str]) -> tuple[tuple[Any, ...], Any]:
    """Load and analyse the traces under ``path``; return (traces, TraceAnalysis).

    Raises TraceError when a trace cannot be read and AnalysisError when it cannot be analysed.
    """
    from app.analysis.trace.summary import analyze_traces
    from app.data.trace import load_traces

    traces = tuple(load_traces(path))
    return traces, analyze_traces(list(traces))


def side_from_run(
    run: RunData,
    *,
    traces: tuple[Any, ...] = (),
    analysis: Any | None = None,
    module_tree: dict[str, Any] | None = None,
    problems: tuple[str, ...] = (),
) -> CompareSide:
    """Wrap already-loaded data of a run as a side (used by the page's cached loaders)."""
    return CompareSide(
        label=run.manifest.name or run.manifest.id,
        path=run.path,
        kind=SideKind.RUN,
        run=run,
        analysis=analysis,
        traces=traces,
        module_tree=module_tree,
        problems=tuple(problems),
    )


def assemble_run_side(
    run: RunData, load_traces: Callable[[Path], tuple[tuple[Any, ...], Any]] | None
) -> CompareSide:
    """A run as a side: its traces and analysis from ``load_traces(path)`` (None: metrics only)
    and its module tree. Unreadable traces or trees become problems; the metrics still allow a
    step-time verdict. The CLI passes direct loaders, the page its cached ones."""
    problems: list[str] = list(run.problems)
    traces: tuple[Any, ...] = ()
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


def _side_trace_files(path: Path) -> list[Path]:
    """The trace files that make ``path`` (an existing file or folder, not a run) one side.

    Raises UsageError when the folder holds several runs (tb-profiler sub-folders or Torchscope
    runs) or no trace at all, naming what it found.
    """
    if path.is_file():
        return [path]  # the trace engine says what is wrong with a file that is not a trace
    scan = trace_files.scan_trace_folder(path)
    if scan.traces:
        return list(scan.traces)
    subs = trace_files.find_trace_run_folders(path)
    if len(subs) > 1:
        names = [s.name for s in subs]
        raise UsageError(f"{path} holds {len(subs)} torch-tb-profiler runs ({', '.join(names)}); a side of a "
                         f"comparison is one run: pass one sub-folder, e.g. {path / names[0]}")
    if subs:
        return list(trace_files.scan_trace_folder(subs[0]).traces)
    runs = sorted(c.name for c in path.iterdir() if rf.is_run_dir(c))
    if runs:
        shown = ", ".join(runs[:5]) + (", …" if len(runs) > 5 else "")
        raise UsageError(f"{path} is a run store of {len(runs)} runs ({shown}); a side of a comparison is "
                         f"one run: pass its folder, id or name (with --root {path})")
    why = "".join(f"; {s.path.name}: {s.reason}" for s in scan.skipped[:3])
    raise UsageError(f"{path}: no run and no trace files found there{why}")


def _load_trace_files(files: list[Path]) -> tuple[tuple[Any, ...], Any]:
    """Load and analyse ``files`` together (one run's ranks or workers), like analyze_side_traces."""
    from app.analysis.trace.summary import analyze_traces
    from app.data.trace import load_traces

    traces = tuple(sorted((t for f in files for t in load_traces(f)), key=lambda t: (t.rank, t.path.name)))
    return traces, analyze_traces(list(traces))


def load_side(
    ref: str | os.PathLike[str], root: str | os.PathLike[str] | None = None, *, with_traces: bool = True
) -> CompareSide:
    """Resolve ``ref`` (run folder, run id or name prefix, trace file, folder of traces, log folder
    of one run) and load it.

    Raises RunNotFoundError when ``ref`` is neither a path nor a run of the store, TraceError
    when bare traces cannot be read, UsageError when a folder holds no trace or several runs.
    """
    path = Path(ref)
    if rf.is_run_dir(path):
        return _load_run_side(path, with_traces)
    if path.exists():
        traces, analysis = _load_trace_files(_side_trace_files(path))
        name = path.name.split(".")[0] if path.is_file() else path.name
        return CompareSide(label=name or str(path), path=path, kind=SideKind.TRACES, analysis=analysis, traces=traces)
    return _load_run_side(rf.find_run(str(ref), root), with_traces)


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
    runs = tuple(load_run(p) for p in members)
    first = assemble_run_side(runs[0], analyze_side_traces if with_traces else None)
    problems = list(first.problems) + [f"{r.manifest.name or r.manifest.id}: {p}" for r in runs[1:] for p in r.problems]
    return CompareSide(label=group, path=first.path, kind=SideKind.RUN, run=runs[0], analysis=first.analysis,
                       traces=first.traces, module_tree=first.module_tree, problems=tuple(problems), replicates=runs)
