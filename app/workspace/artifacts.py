"""A run's artifacts as the front ends open them: the run, its module tree, allocator snapshots, memory timelines,
and the run's own files (logs, graph, raw traces), never followed through a symlink out of the run (workspace layer).

The loaders are app.data's (files → typed tables); the front ends reach them only through here,
so that the workspace stays the one way in (app/ui wraps these in bounded st.cache_*).

A run folder can be planted by someone else, or copied with its links: ``logs/stdout.log ->
/etc/passwd`` must not be shown. Every file read here must resolve inside the run folder
(app.data.safe_io); the one exception is a run of the tb-profiler mirror that the app builds
itself (app.data.tbprofiler.mirror_tb_folder), whose traces are links into the log folder it
mirrors: those may point into that folder, and nowhere else.
"""
from __future__ import annotations

import os
from pathlib import Path

from app.data.runs import RunData, load_module_tree, load_run
from app.data.safe_io import UnsafePath, open_inside, resolve_inside
from app.data.snapshot import load_memory_timeline_raw, load_snapshot, parse_memory_timeline_raw
from app.data.tbprofiler import mirror_cache_dir
from profiler_agent import runformat as rf

__all__ = ["RunData", "UnsafePath", "load_run", "load_module_tree", "read_text_artifact", "read_run_bytes",
           "read_run_text", "run_file_folder", "load_snapshot", "load_memory_timeline_raw", "parse_memory_timeline_raw"]


def _mirrored_source(run_dir: Path) -> Path | None:
    """The tb-profiler sub-folder that ``run_dir`` mirrors, when it is a run of the app's own mirror
    store of that sub-folder's log folder (its manifest says where it came from, and the run lies
    where mirror_cache_dir puts that log folder's mirror); None for any other run."""
    try:
        source = rf.read_manifest(run_dir).extra.get("imported_from")
    except (rf.TorchscopeError, OSError):
        return None
    if not isinstance(source, str) or not source:
        return None
    src = Path(source)
    try:
        if run_dir.resolve().parent != mirror_cache_dir(src.parent).resolve():
            return None
    except OSError:
        return None
    return src


def run_file_folder(run_dir: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """The folder ``path`` (a file of the run ``run_dir``, relative or absolute) may be read from:
    the run folder, or for a run of the app's tb-profiler mirror the log sub-folder it mirrors.

    Raises UnsafePath naming the file and the run when it (or a symlink on the way) leaves both.
    """
    folder = Path(run_dir)
    target = Path(path) if Path(path).is_absolute() else folder / path
    try:
        resolve_inside(folder, target)
        return folder
    except UnsafePath:
        source = _mirrored_source(folder)
        if source is not None:
            try:
                resolve_inside(source, target)
                return source
            except UnsafePath:
                pass
    raise UnsafePath(f"{target}: a link out of the run folder {folder}; not shown")


def read_run_bytes(run_dir: str | os.PathLike[str], path: str | os.PathLike[str], *,
                   max_bytes: int | None = None) -> bytes:
    """The bytes of the run's file ``path`` (the last ``max_bytes`` when given), read without
    following a link out of the run. Raises UnsafePath for a link out, OSError when unreadable."""
    target = Path(path) if Path(path).is_absolute() else Path(run_dir) / path
    with open_inside(run_file_folder(run_dir, target), target) as f:
        if max_bytes is not None:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                f.seek(size - max_bytes)
            return f.read(max_bytes)
        return f.read()


def read_run_text(run_dir: str | os.PathLike[str], path: str | os.PathLike[str], *,
                  max_bytes: int | None = None) -> str:
    """:func:`read_run_bytes` decoded as UTF-8 (undecodable bytes replaced)."""
    return read_run_bytes(run_dir, path, max_bytes=max_bytes).decode("utf-8", errors="replace")


def read_text_artifact(run_dir: str | os.PathLike[str], name: str, *, max_bytes: int = 2_000_000) -> str | None:
    """The tail (at most ``max_bytes``) of a text file of the run, e.g. layout.STDOUT_LOG; None when
    the run has no such file. Raises UnsafePath when the file is a link out of the run."""
    path = Path(run_dir) / name
    if not path.is_file() and not path.is_symlink():
        return None
    try:
        return read_run_text(run_dir, path, max_bytes=max_bytes)
    except FileNotFoundError:  # a dangling link, or removed since the check
        return None
