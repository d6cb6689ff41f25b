"""Profiler traces from outside Torchscope turned into runs (data layer: files → run folders).

Handles a single Kineto/Chrome trace file, a folder of trace files (one per rank or worker,
one run), and torch-tb-profiler's log folder (one sub-folder per run, one file per worker).
The originals are never changed: traces are copied (``torchscope import``) or symlinked (the
read-only mirror that ``torchscope ui --root <tb log folder>`` builds under the user's cache).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.data import trace_files
from app.data.trace_files import Skipped
from app.data.trace_head import read_trace_meta, read_trace_start
from app.errors import UsageError
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = [
    "ImportGroup",
    "ImportPlan",
    "Skipped",
    "is_trace_file",
    "find_tb_runs",
    "explain_store_problems",
    "plan_import",
    "import_plan",
    "import_traces",
    "mirror_cache_dir",
    "mirror_tb_folder",
    "mirrored_folder",
]

IMPORTED_TAG = "imported"
# Bumped when an import derives a manifest differently, so that mirrors are rebuilt (2: started
# from the trace's own clock instead of the file's mtime).
_IMPORT_VERSION = 2


def is_trace_file(path: Path) -> bool:
    """True for a ``*.json`` / ``*.json.gz`` file whose content is a Kineto/Chrome trace
    (app.data.trace_files: sniffed from its first bytes, not judged by its name)."""
    return trace_files.is_trace_file(path)


def find_tb_runs(folder: str | os.PathLike[str]) -> list[Path]:
    """Sub-folders of ``folder`` that are torch-tb-profiler runs: they hold trace files (by
    content, whatever their names) and no run manifest. Sorted by name."""
    return trace_files.find_trace_run_folders(folder)


def explain_store_problems(problems: list[str], not_runs: list[Path], tb_runs: list[Path]) -> list[str]:
    """The store's problems with each "not a run folder" message of a sub-folder replaced by why
    it was skipped (no trace files, or files that are not traces), and dropped for the
    ``tb_runs``, which are listed through the mirror instead."""
    mirrored = {Path(s) for s in tb_runs}
    not_run_of = {rf.not_a_run_problem(folder): folder for folder in not_runs}
    out = []
    for p in problems:
        folder = not_run_of.get(p)
        if folder is None:
            out.append(p)
        elif folder not in mirrored:
            out.append(f"{folder}: {trace_files.describe_non_run_folder(folder)}")
    return out


def _started(path: Path) -> float:
    """When the trace says its profiling started, else the file's modification time."""
    start = read_trace_start(path)
    return start if start is not None else path.stat().st_mtime


def _target_name(src: Path, used: set[str], start_ns: int) -> str:
    """The name tensorboard_trace_handler would give the trace (``<worker>.<time_ns>``, time_ns
    = when the trace started), or its own name when it already has that form."""
    gz = src.name.endswith(".gz")
    named = layout.TRACE_FILE_RE.match(src.name)
    if named:
        name, worker = src.name, named.group("worker")
    else:
        worker = src.name.removesuffix(".gz").removesuffix(".json").replace(".", "_") or "trace"
        name = layout.trace_file_name(worker, start_ns, gzip=gz)
    n = 1
    while name in used:
        name = layout.trace_file_name(f"{worker}-{n}", time.time_ns(), gzip=gz)
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


def _place_traces(run_dir: Path, files: list[Path], ranks: list[int | None], starts: list[float], *,
                  link: bool) -> list[rf.Artifact]:
    """Copy (or symlink) the trace files into the run's traces folder; return their artifacts."""
    traces = run_dir / layout.TRACES_DIR
    traces.mkdir()
    used: set[str] = set()
    artifacts = []
    for src, rank, start in zip(files, ranks, starts):
        target = traces / _target_name(src, used, round(start * 1e6) * 1000)  # float s: µs are exact
        if link:
            try:
                target.symlink_to(src.resolve())
            except OSError:
                _copy(src, target)
        else:
            _copy(src, target)
        artifacts.append(rf.Artifact(kind=rf.ArtifactKind.TRACE, path=f"{layout.TRACES_DIR}/{target.name}",
                                     rank=rank, bytes=src.stat().st_size))
    return artifacts


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
    artifacts = _place_traces(run_dir, files, [m.rank for m in metas], starts, link=link)
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


# Mirror stores built by this process (store → the tb log folder it mirrors), for a mirror made in
# a folder other than mirror_cache_dir's (tests, and callers that pass cache_dir).
_BUILT: dict[Path, Path] = {}


def mirrored_folder(run_dir: str | os.PathLike[str]) -> Path | None:
    """The tb log folder whose traces the run's trace links may point into, when ``run_dir`` is a
    run of a mirror store the app built itself (at ``mirror_cache_dir(folder)``, or by this process);
    None for every other run, whose files are never followed out of the run folder. A manifest
    alone cannot make a run a mirror: its store must sit where the app puts that folder's mirror."""
    store = Path(run_dir).resolve().parent
    if store in _BUILT:
        return _BUILT[store]
    if store.parent.name != "tb-mirror":
        return None
    try:
        source = rf.read_manifest(run_dir).extra.get("imported_from")
    except rf.TorchscopeError:
        return None
    if not isinstance(source, str):
        return None
    folder = Path(source).parent
    return folder.resolve() if mirror_cache_dir(folder).resolve() == store else None


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
    _BUILT[store.resolve()] = Path(folder).resolve()
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
