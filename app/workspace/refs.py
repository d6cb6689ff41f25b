"""What the user named, resolved to something on disk: the one resolver of references (workspace layer).

A reference is a run folder, a run id or unique name prefix in a store, a trace file, a folder of
traces, or a torch-tb-profiler log folder (one sub-folder per run). :func:`resolve_ref` says which
of these ``ref`` is; the commands then ask the question they need answered:

- :func:`pick_tb_run` (``torchscope analyze``): the folder to analyse, ``--run NAME`` picking one
  run of a log folder;
- :func:`side_trace_files` (``torchscope diff``): the trace files that make one side;
- :func:`require_traces` (``torchscope advise``): a bare-traces reference must hold traces.

References typed on the command line are the user's own and may name any path.
:func:`resolve_store_run` is for references that arrive from elsewhere (the UI's ``?run=`` and
``?runs=`` query parameters): they resolve to a run inside the store or are refused, so that a
link cannot make the app read a folder planted outside it.

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

__all__ = ["RefKind", "Ref", "resolve_ref", "resolve_path", "resolve_store_run", "pick_tb_run",
           "side_trace_files", "require_traces", "NAME_MAX_BYTES"]

# The longest file name most file systems allow (ext4, xfs, APFS, NTFS in UTF-16 units): a longer
# reference can name no run folder, and the OS answers a stat of it with ENAMETOOLONG.
NAME_MAX_BYTES = 255


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


def _shown(text: str, limit: int = 80) -> str:
    """``text`` as a message quotes it: control characters escaped, at most ``limit`` characters."""
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 1] + "…"


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def resolve_store_run(ref: str, root: str | os.PathLike[str]) -> Path:
    """The run folder of the store ``root`` that ``ref`` names: a run id, a name or unique prefix,
    or a path of a folder inside the store (relative to it, or absolute).

    Unlike :func:`resolve_ref`, ``ref`` is untrusted (a URL's query parameter): an absolute path or
    a ``..`` leaving the store, a path through a symlink out of it, and a run found next to
    the server's working folder are all refused. Raises UsageError naming ``ref`` and the store for
    those and for a reference longer than a file name can be; RunNotFoundError when no run
    matches; the run format's errors when the folder it names is not a readable run.
    """
    text = str(ref)
    store = Path(root)
    if "\x00" in text or any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES
                             for part in text.split("/")):
        # No folder can have this name (a stat of it fails with ENAMETOOLONG or ValueError): only a
        # run's name can match it.
        named = _store_run_by_name(text, store)
        if named is not None:
            return named
        why = ("holds a NUL character, which no file name can" if "\x00" in text
               else f"{len(text)} characters, longer than a file name can be")
        raise UsageError(f"run {_shown(text)}: {why}; no run of the store {store} has it as its id or name")
    path = Path(text)
    outside = UsageError(f"run {_shown(text)}: outside the run store {store}; the app opens only the runs of its "
                         "store (start `torchscope ui --root FOLDER` to browse another one)")
    try:
        if path.is_absolute() or len(path.parts) > 1 or text in (".", ".."):
            return _store_run_by_path(text, store, outside)
        found = rf.find_run(text, store)
        # find_run tries ``ref`` as a path first, relative to the working folder: only a run of
        # the store itself counts here (lexically: the store's own entries, links included).
        if Path(os.path.abspath(found)).parent != Path(os.path.abspath(store)):
            raise outside
        return found
    except OSError as e:  # e.g. a folder the server may not read
        raise UsageError(f"run {_shown(text)}: cannot be opened in the store {store} ({e.strerror or e})") from None


def _store_run_by_name(text: str, store: Path) -> Path | None:
    """The run of ``store`` whose id or folder is ``text``, else the newest named ``text``, else the
    one run whose id or name starts with it; None when there is no such run."""
    runs = rf.list_runs(store).runs
    for matches in ([p for p, m in runs if m.id == text or p.name == text], [p for p, m in runs if m.name == text]):
        if matches:
            return matches[0]
    prefix = [p for p, m in runs if m.id.startswith(text) or m.name.startswith(text)]
    return prefix[0] if len(prefix) == 1 else None


def _store_run_by_path(text: str, store: Path, outside: UsageError) -> Path:
    """A path-like reference: a run folder inside the store (links followed), else a run whose
    name merely holds a "/" ("lr/2"); raises ``outside`` when it is neither and leaves the store."""
    base = store.resolve()
    folder = (store / text).resolve()  # an absolute path stays itself; links are followed
    inside = _inside(folder, base) and folder != base
    if inside and rf.is_run_dir(folder):
        return folder
    named = _store_run_by_name(text, store)
    if named is not None:
        return named
    if not _inside(folder, base):
        raise outside
    if inside and folder.is_dir():
        rf.read_manifest(folder)  # raises why the folder is not a readable run
    raise rf.RunNotFoundError(f"{text!r}: no run with that id or name in {store}")


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
