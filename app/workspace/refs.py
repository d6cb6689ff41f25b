"""What the user named, resolved to something on disk: the one resolver of references (workspace layer).

A reference is a run folder, a run id or unique name prefix in a store, a trace file, a folder of
traces, or a torch-tb-profiler log folder (one sub-folder per run). :func:`resolve_ref` says which
of these ``ref`` is; the commands then ask the question they need answered:

- :func:`pick_tb_run` (``torchscope analyze``): the folder to analyse, ``--run NAME`` picking one
  run of a log folder;
- :func:`side_trace_files` (``torchscope diff``): the trace files that make one side;
- :func:`require_traces` (``torchscope advise``): a bare-traces reference must hold traces.

The messages are the ones each command gave before the resolver was shared (the golden test and
tests/cli hold them).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from app.data import trace_files
from app.data.trace import trace_run_folders
from app.errors import UsageError
from profiler_agent import runformat as rf
from profiler_agent.runformat.errors import TorchscopeError

__all__ = ["RefKind", "Ref", "resolve_ref", "resolve_path", "pick_tb_run", "side_trace_files",
           "require_traces"]


class RefKind(StrEnum):
    """What a reference turned out to be."""

    RUN = "run"  # a Torchscope run folder (named by path, id or name prefix)
    FILE = "file"  # a file that is not a run: the trace engine says whether it is a trace
    FOLDER = "folder"  # a folder that is not a run: traces, a tb-profiler log folder, or a store


@dataclass(frozen=True)
class Ref:
    """A resolved reference: the text the user gave, the path it names and what that path is."""

    text: str
    path: Path
    kind: RefKind


def resolve_ref(ref: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Ref:
    """Resolve ``ref``: an existing path is taken as it is (a run folder, a file or a folder),
    anything else is a run id or unique name prefix in the store ``root``.

    Raises RunNotFoundError naming ``ref`` when no run matches or the prefix is ambiguous, and
    the run format's errors for a store folder of that name that is not a readable run.
    """
    path = Path(ref)
    if rf.is_run_dir(path):
        return Ref(str(ref), path, RefKind.RUN)
    if path.exists():
        return Ref(str(ref), path, RefKind.FILE if path.is_file() else RefKind.FOLDER)
    return Ref(str(ref), rf.find_run(str(ref), root), RefKind.RUN)


def resolve_path(ref: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """The path ``ref`` names (``torchscope analyze``'s reading of it).

    Raises UsageError "<ref>: no such file, folder or run" when it is neither a path nor a run.
    """
    try:
        return resolve_ref(ref, root).path
    except TorchscopeError:
        raise UsageError(f"{ref}: no such file, folder or run") from None


def pick_tb_run(path: Path, run: str | None) -> Path:
    """The folder to analyse: with ``run``, that sub-folder of a torch-tb-profiler log folder.

    Raises UsageError when ``run`` is given for a folder that is no log folder or names no run
    of it, and when a log folder holds several runs and ``run`` is None (naming them).
    """
    runs = trace_run_folders(path)
    names = [r.name for r in runs]
    if run is not None:
        if not runs:
            raise UsageError(f"--run {run}: {path} is not a torch-tb-profiler log folder "
                             "(no sub-folders holding trace files)")
        if run not in names:
            raise UsageError(f"--run {run}: {path} has no such run; its runs: {', '.join(names)}")
        return path / run
    if len(runs) > 1:
        raise UsageError(f"{path} holds {len(runs)} torch-tb-profiler runs ({', '.join(names)}); "
                         f"pick one with --run NAME or analyse its sub-folder, e.g. {path / names[0]}")
    return path


def _store_runs(path: Path) -> list[str]:
    return sorted(c.name for c in path.iterdir() if rf.is_run_dir(c))


def side_trace_files(path: Path) -> list[Path]:
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
    runs = _store_runs(path)
    if runs:
        shown = ", ".join(runs[:5]) + (", …" if len(runs) > 5 else "")
        raise UsageError(f"{path} is a run store of {len(runs)} runs ({shown}); a side of a comparison is "
                         f"one run: pass its folder, id or name (with --root {path})")
    why = "".join(f"; {s.path.name}: {s.reason}" for s in scan.skipped[:3])
    raise UsageError(f"{path}: no run and no trace files found there{why}")


def require_traces(path: Path, traces: Sequence[object]) -> None:
    """Raise UsageError "<path>: no profiler traces found" when a bare-traces reference loaded none."""
    if not traces:
        raise UsageError(f"{path}: no profiler traces found")
