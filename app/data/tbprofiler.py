"""Profiler traces from outside Torchscope turned into runs (data layer: files → run folders).

Handles a single Kineto/Chrome trace file, a folder of trace files (one per rank or worker,
one run), and torch-tb-profiler's log folder (one sub-folder per run, one file per worker).
The originals are never changed: traces are copied (``torchscope import``) or symlinked (the
read-only mirror that ``torchscope ui --root <tb log folder>`` builds under the user's cache).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.data import trace_files
from app.data.trace_files import Skipped
from app.errors import UsageError
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = [
    "TraceMeta",
    "ImportGroup",
    "ImportPlan",
    "Skipped",
    "is_trace_file",
    "find_tb_runs",
    "explain_store_problems",
    "plan_import",
    "import_plan",
    "read_trace_meta",
    "read_trace_start",
    "import_traces",
    "mirror_cache_dir",
    "mirror_tb_folder",
]

IMPORTED_TAG = "imported"
# Bumped when an import derives a manifest differently, so that mirrors are rebuilt (2: started
# from the trace's own clock instead of the file's mtime).
_IMPORT_VERSION = 2
# Bytes of (decompressed) text read to find the metadata Kineto writes before "traceEvents".
_HEAD_BYTES = 1 << 18
# Bytes of the end of a trace searched for the fields Kineto writes after "traceEvents".
_TAIL_BYTES = 1 << 12
_BASE_TIME_RE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
_TS_RE = re.compile(rb'"ts"\s*:\s*(\d+(?:\.\d*)?)')
# Event timestamps read as epoch µs are believed between these dates (2015-01-01 .. 2100-01-01).
_EPOCH_S_RANGE = (1_420_070_400.0, 4_102_444_800.0)


def is_trace_file(path: Path) -> bool:
    """True for a ``*.json`` / ``*.json.gz`` file whose content is a Kineto/Chrome trace
    (app.data.trace_files: sniffed from its first bytes, not judged by its name)."""
    return trace_files.is_trace_file(path)


def find_tb_runs(folder: str | os.PathLike[str]) -> list[Path]:
    """Sub-folders of ``folder`` that are torch-tb-profiler runs: they hold trace files (by
    content, whatever their names) and no run manifest. Sorted by name."""
    return trace_files.find_trace_run_folders(folder)


_NOT_A_RUN_SUFFIX = f": not a run folder (no {layout.MANIFEST}); skipped"


def explain_store_problems(problems: list[str], tb_runs: list[Path]) -> list[str]:
    """The store's problems with each "not a run folder" message of a sub-folder replaced by why
    it was skipped (no trace files, or files that are not traces), and dropped for the
    ``tb_runs``, which are listed through the mirror instead."""
    mirrored = {Path(s) for s in tb_runs}
    out = []
    for p in problems:
        if not p.endswith(_NOT_A_RUN_SUFFIX):
            out.append(p)
            continue
        folder = Path(p[: -len(_NOT_A_RUN_SUFFIX)])
        if folder not in mirrored:
            out.append(f"{folder}: {trace_files.describe_non_run_folder(folder)}")
    return out


@dataclass(frozen=True)
class TraceMeta:
    """What a trace says about where it was recorded (from the fields before ``traceEvents``)."""

    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    devices: tuple[dict[str, Any], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def _read_head(path: Path) -> bytes:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return f.read(_HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return b""


def _open_text_head(path: Path) -> str:
    return _read_head(path).decode("utf-8", errors="replace")


def _read_tail(path: Path) -> bytes:
    """The last ``_TAIL_BYTES`` of the trace's text. A plain file is read from its end; a gzip
    stream cannot be entered at its end, so it is decompressed in chunks keeping only the last
    ones (constant memory, ~0.1 s per 30 MB of JSON)."""
    try:
        if not path.name.endswith(".gz"):
            with open(path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - _TAIL_BYTES))
                return f.read()
        tail = b""
        with gzip.open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                tail = (tail + chunk)[-_TAIL_BYTES:]
        return tail
    except (OSError, EOFError, zlib.error):
        return b""


def read_trace_start(path: str | os.PathLike[str]) -> float | None:
    """Return when the trace's profiling started, in epoch seconds, or None when the trace does
    not say (the caller then falls back to the file's modification time).

    Kineto (torch ≥ 2.3) writes ``ts`` in µs *relative to* ``baseTimeNanoseconds``, a top-level
    field it writes after ``traceEvents``, at the end of the file; that base is the wall clock
    floored to a 3-month boundary, so on its own it can be three months early. The start is
    therefore base + the earliest ``ts`` found in the head of the file. Older traces have no base
    and write ``ts`` as epoch µs: the earliest ``ts`` is used when it reads as a date between 2015
    and 2100. Only the first 256 KiB of events are looked at, so the start is that of the
    earliest event there (Kineto writes host events in time order, first).
    """
    p = Path(path)
    head = _read_head(p)
    cut = head.find(b'"traceEvents"')
    if cut < 0:
        return None
    stamps = [float(m.group(1)) for m in _TS_RE.finditer(head, cut)]
    stamps = [t for t in stamps if t > 0]
    if not stamps:
        return None
    first_us = min(stamps)
    base = _BASE_TIME_RE.search(head[:cut]) or _BASE_TIME_RE.search(_read_tail(p))
    # A writer that sets a base but still writes epoch µs: the second reading is the plausible one.
    candidates = ([int(base.group(1)) / 1e9 + first_us / 1e6] if base else []) + [first_us / 1e6]
    return next((s for s in candidates if _EPOCH_S_RANGE[0] <= s <= _EPOCH_S_RANGE[1]), None)


def read_trace_meta(path: str | os.PathLike[str]) -> TraceMeta:
    """Read rank, world size and devices from the head of a trace, without parsing its events.

    Returns an empty TraceMeta when the head cannot be parsed (the trace engine will still
    report the trace's own problems when it is opened).
    """
    head = _open_text_head(Path(path))
    cut = head.find('"traceEvents"')
    if cut < 0:
        return TraceMeta()
    prefix = head[:cut].rstrip().rstrip(",")
    try:
        meta = json.loads(prefix + "}") if prefix.lstrip().startswith("{") else {}
    except json.JSONDecodeError:
        return TraceMeta()
    raw_dist = meta.get("distributedInfo")
    dist: dict[str, Any] = raw_dist if isinstance(raw_dist, dict) else {}
    devices = tuple(
        {
            "type": "cuda",
            "index": d.get("id"),
            "name": d.get("name"),
            "total_memory_bytes": d.get("totalGlobalMem"),
        }
        for d in meta.get("deviceProperties") or ()
        if isinstance(d, dict)
    )
    rank = dist.get("rank")
    ws = dist.get("world_size")
    return TraceMeta(
        rank=rank if isinstance(rank, int) else None,
        world_size=ws if isinstance(ws, int) else None,
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        devices=devices,
    )


def _started(path: Path) -> float:
    """When the trace says its profiling started, else the file's modification time."""
    start = read_trace_start(path)
    return start if start is not None else path.stat().st_mtime


def _target_name(src: Path, used: set[str], start_ns: int) -> str:
    """The name tensorboard_trace_handler would give the trace (``<worker>.<time_ns>``, time_ns
    = when the trace started), or its own name when it already has that form."""
    if layout.TRACE_FILE_RE.match(src.name):
        name = src.name
    else:
        worker = src.name.removesuffix(".gz").removesuffix(".json").replace(".", "_") or "trace"
        name = layout.trace_file_name(worker, start_ns, gzip=src.name.endswith(".gz"))
    base, n = name, 1
    while name in used:
        worker = layout.TRACE_FILE_RE.match(base).group("worker")  # type: ignore[union-attr]
        name = layout.trace_file_name(f"{worker}-{n}", time.time_ns(), gzip=base.endswith(".gz"))
        n += 1
    used.add(name)
    return name


def _signature(files: list[Path]) -> list[list[Any]]:
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def _copy(src: Path, target: Path) -> None:
    # Contents and times only: a read-only original must not give a read-only copy.
    shutil.copyfile(src, target)
    st = src.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def _make_run(root: Path, name: str, source: Path, files: list[Path], *, link: bool) -> Path:
    metas = [read_trace_meta(f) for f in files]
    devices: tuple[dict[str, Any], ...] = next((m.devices for m in metas if m.devices), ())
    world = max([m.world_size or 0 for m in metas] + [len(files)])
    starts = [_started(f) for f in files]
    started = min(starts)
    run_dir, _ = rf.create_run(
        root,
        name,
        command=("torchscope", "import", str(source)),
        tags=(IMPORTED_TAG,),
        extra={"imported_from": str(source.resolve()), "source_signature": _signature(files),
               "import_version": _IMPORT_VERSION},
    )
    traces = run_dir / layout.TRACES_DIR
    traces.mkdir()
    used: set[str] = set()
    artifacts = []
    for src, meta, start in zip(files, metas, starts):
        target = traces / _target_name(src, used, round(start * 1e6) * 1000)  # float s: µs are exact
        if link:
            try:
                target.symlink_to(src.resolve())
            except OSError:
                _copy(src, target)
        else:
            _copy(src, target)
        artifacts.append(
            rf.Artifact(
                kind=rf.ArtifactKind.TRACE,
                path=f"{layout.TRACES_DIR}/{target.name}",
                rank=meta.rank,
                bytes=src.stat().st_size,
            )
        )
    rf.update_manifest(
        run_dir,
        status=rf.RunStatus.FINISHED,
        started_at=started,
        ended_at=None,  # a trace says when it was written, not how long the job ran
        heartbeat=None,
        # The trace does not say where or how the job ran: the importer's host, folder and a
        # made-up exit code would be shown as the job's.
        pid=None,
        host=None,
        cwd=None,
        exit_code=None,
        devices=devices,
        world_size=world,
        artifacts=tuple(artifacts),
    )
    return run_dir


@dataclass(frozen=True)
class ImportGroup:
    """One run to create: its name, the file or folder it comes from and its trace files."""

    name: str
    source: Path
    files: tuple[Path, ...]


@dataclass(frozen=True)
class ImportPlan:
    """What ``torchscope import PATH`` will create, and what it leaves out and why."""

    groups: tuple[ImportGroup, ...]
    skipped: tuple[Skipped, ...]


def _skipped_folder(folder: Path) -> Skipped:
    if rf.is_run_dir(folder):
        return Skipped(folder, "already a Torchscope run; nothing to import")
    return Skipped(folder, trace_files.describe_traceless_folder(folder))


def _visible_subfolders(folder: Path) -> list[Path]:
    return sorted(c for c in folder.iterdir() if c.is_dir() and not c.name.startswith("."))


def _nothing_to_import(source: Path, skipped: list[Skipped]) -> UsageError:
    why = "; ".join(f"{s.path.name}: {s.reason}" for s in skipped[:3])
    more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return UsageError(
        f"{source}: no trace files found (expected Kineto/Chrome traces, *.json or *.json.gz, or "
        f"sub-folders of them as torch-tb-profiler writes){' - ' + why + more if why else ''}"
    )


def plan_import(source: str | os.PathLike[str], name: str | None = None) -> ImportPlan:
    """Decide the runs that importing ``source`` makes (see :func:`import_traces`).

    A folder that holds trace files is one run (as ``torchscope analyze`` reads it); its
    sub-folders are then left out. Otherwise each sub-folder holding traces is a run. Files that
    are not traces and folders without any are listed in ``skipped`` with the reason. Raises
    UsageError when ``source`` is missing, is a run, is a file that is not a trace (naming the
    problem), or holds no trace at all.
    """
    source = Path(source)
    if source.is_file():
        problem = trace_files.trace_file_problem(source)
        if problem is not None:
            raise UsageError(f"{source}: {problem}; nothing imported")
        return ImportPlan((ImportGroup(name or source.name.split(".")[0], source, (source,)),), ())
    if not source.is_dir():
        raise UsageError(f"{source}: no such file or folder")
    if rf.is_run_dir(source):
        raise UsageError(f"{source}: is already a Torchscope run; nothing to import")
    scan = trace_files.scan_trace_folder(source)
    subs = find_tb_runs(source)
    skipped = list(scan.skipped)
    if scan.traces:
        skipped += [Skipped(s, "a sub-folder of traces, not part of this folder's run (import it on its own)")
                    for s in subs]
        return ImportPlan((ImportGroup(name or source.name, source, scan.traces),), tuple(skipped))
    groups = []
    for sub in _visible_subfolders(source):
        if sub not in subs:
            skipped.append(_skipped_folder(sub))
            continue
        sub_scan = trace_files.scan_trace_folder(sub)
        skipped += sub_scan.skipped
        groups.append(ImportGroup(f"{name}-{sub.name}" if name else sub.name, sub, sub_scan.traces))
    if not groups:
        raise _nothing_to_import(source, skipped)
    return ImportPlan(tuple(groups), tuple(skipped))


def import_plan(plan: ImportPlan, root: str | os.PathLike[str], *, link: bool = False) -> list[Path]:
    """Create the runs of ``plan`` under the store ``root``; return the new run folders."""
    return [_make_run(Path(root), g.name, g.source, list(g.files), link=link) for g in plan.groups]


def import_traces(
    source: str | os.PathLike[str],
    root: str | os.PathLike[str],
    *,
    name: str | None = None,
    link: bool = False,
) -> list[Path]:
    """Turn traces into finished runs under the store ``root``; return the new run folders.

    ``source`` is a trace file, a folder of trace files (one run) or a torch-tb-profiler log
    folder (one run per sub-folder); what is a trace is decided by content
    (app.data.trace_files). Traces are copied (symlinked when ``link``), renamed the way
    tensorboard_trace_handler names them; the originals are untouched. Raises UsageError when
    ``source`` holds no traces or is a file that is not one. Use :func:`plan_import` to learn
    what was skipped.
    """
    return import_plan(plan_import(source, name), root, link=link)


def mirror_cache_dir(folder: str | os.PathLike[str]) -> Path:
    """The store where the read-only mirror of a tb-profiler log folder lives:
    ``$TORCHSCOPE_CACHE`` or ``~/.cache/torchscope``, then ``tb-mirror/<hash of the folder's path>``."""
    base = Path(os.environ.get("TORCHSCOPE_CACHE") or Path.home() / ".cache" / "torchscope")
    digest = hashlib.sha1(str(Path(folder).resolve()).encode()).hexdigest()[:16]
    return base / "tb-mirror" / digest


def mirror_tb_folder(
    folder: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None
) -> Path | None:
    """Keep a store of symlinked runs in step with the tb-profiler sub-folders of ``folder``.

    A sub-folder whose files changed is re-imported; one that disappeared is dropped. Returns
    the mirror store, or None when ``folder`` holds no tb-profiler runs.
    """
    subs = find_tb_runs(folder)
    if not subs:
        return None
    store = Path(cache_dir) if cache_dir else mirror_cache_dir(folder)
    store.mkdir(parents=True, exist_ok=True)
    existing: dict[str, tuple[Path, Any]] = {}
    for run_dir, manifest in rf.list_runs(store).runs:
        src = manifest.extra.get("imported_from")
        if isinstance(src, str):
            # A run mirrored by an older import (e.g. started from the file's mtime) is redone.
            current = manifest.extra.get("import_version") == _IMPORT_VERSION
            existing[src] = (run_dir, manifest.extra.get("source_signature") if current else None)
    wanted = {str(s.resolve()): s for s in subs}
    for src, (run_dir, _) in existing.items():
        if src not in wanted:
            shutil.rmtree(run_dir, ignore_errors=True)
    for src, sub in wanted.items():
        files = list(trace_files.scan_trace_folder(sub).traces)
        old = existing.get(src)
        if old and old[1] == _signature(files):
            continue
        if old:
            shutil.rmtree(old[0], ignore_errors=True)
        _make_run(store, sub.name, sub, files, link=True)
    return store
