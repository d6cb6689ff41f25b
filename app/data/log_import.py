"""`torchscope import` of log folders: traces and TensorBoard scalars made runs (data layer: files → runs).

One run per folder: a folder of traces (``app.data.tbprofiler``) and a folder of event files
(``app.data.tfevents``) that are the same folder make one run with both, the usual layout when
``tensorboard_trace_handler`` and ``SummaryWriter`` share a log dir. Scalars become metrics lines
(``step`` = the event's step, also kept as ``tb_step``, ``time`` = its wall time as seconds since
the run's start), one line per (step, wall time), so the scalars of one ``add_scalars`` call share
a line as the agent writes them. tensorboard is needed only when event files are found.
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.data import tbprofiler
from app.data.tbprofiler import IMPORTED_TAG, ImportGroup, ImportPlan
from app.data.tfevents import EventRun, is_event_file, scan_event_runs
from app.data.trace_files import Skipped
from app.errors import UsageError
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from profiler_agent.runformat.metric_keys import TB_STEP_KEY

__all__ = ["LogRun", "LogImportPlan", "plan_log_import", "import_log_plan", "write_event_metrics"]


@dataclass(frozen=True)
class LogRun:
    """One run to create: its name and folder (or file), its traces and its TensorBoard scalars."""

    name: str
    source: Path
    traces: ImportGroup | None
    events: EventRun | None


@dataclass(frozen=True)
class LogImportPlan:
    """What ``torchscope import PATH`` will create, and what it leaves out and why."""

    runs: tuple[LogRun, ...]
    skipped: tuple[Skipped, ...]


def _key(path: Path) -> Path:
    return path.resolve()


def _event_name(run: EventRun, source: Path, name: str | None) -> str:
    """Like trace runs: the source's own run is ``name`` or its folder's name, others their path below it."""
    base = source if source.is_dir() else source.parent
    rel = run.folder.relative_to(base).as_posix() if run.folder != base else ""
    if not rel:
        return name or base.resolve().name
    return f"{name}-{rel}" if name else rel


def _nothing(source: Path, skipped: list[Skipped]) -> UsageError:
    def shown(path: Path) -> str:  # event files may lie deep below the source: say where
        return path.relative_to(source).as_posix() if path.is_relative_to(source) else str(path)

    why = "; ".join(f"{shown(s.path)}: {s.reason}" for s in skipped[:3])
    more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return UsageError(
        f"{source}: no trace files and no TensorBoard scalars found (expected Kineto/Chrome traces, *.json "
        f"or *.json.gz, or TensorBoard event files, events.out.tfevents.*, in it or in its sub-folders)"
        f"{' - ' + why + more if why else ''}"
    )


def plan_log_import(source: str | os.PathLike[str], name: str | None = None) -> LogImportPlan:
    """Decide the runs that importing ``source`` makes: its trace runs (as
    ``tbprofiler.plan_import``), each given the scalars of the event files in the same folder,
    and a run for every other folder holding TensorBoard scalars.

    Raises UsageError when ``source`` is missing, is a run, is a file that is neither a trace
    nor a readable event file, or holds neither traces nor scalars (naming the files and why).
    """
    source = Path(source)
    if not source.exists():
        raise UsageError(f"{source}: no such file or folder")
    if source.is_dir() and rf.is_run_dir(source):
        raise UsageError(f"{source}: is already a Torchscope run; nothing to import")
    if source.is_file() and not is_event_file(source):
        plan = tbprofiler.plan_import(source, name)  # a trace file, or its error
        return LogImportPlan(tuple(LogRun(g.name, g.source, g, None) for g in plan.groups), plan.skipped)
    scan = scan_event_runs(source)
    if source.is_file():
        if scan.skipped:
            raise UsageError(f"{source}: {scan.skipped[0].reason}; nothing imported")
        scan_runs = [r for r in scan.runs if r.points]
        if not scan_runs:
            raise UsageError(f"{source}: no scalars in this TensorBoard event file; nothing imported")
        run_name = name or source.parent.resolve().name
        return LogImportPlan(tuple(LogRun(run_name, source, None, r) for r in scan_runs), ())
    trace_error: UsageError | None = None
    try:
        traces = tbprofiler.plan_import(source, name)
    except UsageError as e:  # no traces: the scalars may still make runs
        traces, trace_error = ImportPlan((), ()), e
    events = {_key(r.folder): r for r in scan.runs}
    runs = [LogRun(g.name, g.source, g, events.pop(_key(g.source), None)) for g in traces.groups]
    # A folder skipped for holding no traces may hold scalars, itself or below (add_scalars folders).
    event_folders = {_key(f.parent) for r in scan.runs for f in r.files}
    skipped = [s for s in traces.skipped
               if not any(_key(s.path) == d or _key(s.path) in d.parents for d in event_folders)]
    skipped += scan.skipped
    for run in events.values():
        if run.points:
            runs.append(LogRun(_event_name(run, source, name), run.folder, None, run))
        else:
            skipped.append(Skipped(run.folder, "TensorBoard event files without scalars (histograms, images "
                                               "or text only); nothing to import"))
    if not runs:
        if trace_error is not None and not scan.runs and not scan.skipped:  # no event file at all
            raise UsageError(f"{trace_error}; and no TensorBoard event files (events.out.tfevents.*) in it "
                             f"or below") from None
        raise _nothing(source, skipped)
    return LogImportPlan(tuple(runs), tuple(skipped))


def _lines(run: EventRun, started_at: float) -> list[dict[str, Any]]:
    """One metrics line per (step, wall time) of the run's scalars, in step order."""
    lines: dict[tuple[int, float], dict[str, Any]] = defaultdict(dict)
    for p in run.points:
        lines[(p.step, p.wall_time)][p.key] = p.value
    return [{"step": step, "time": round(wall - started_at, 6), "rank": 0, TB_STEP_KEY: step, **values}
            for (step, wall), values in lines.items()]


def write_event_metrics(run_dir: Path, run: EventRun) -> rf.Manifest:
    """Write ``run``'s scalars as the run's metrics.jsonl, record it in the manifest and widen
    the manifest's start and end to the events' wall times; return the new manifest."""
    manifest = rf.read_manifest(run_dir)
    started = min(run.started_at, manifest.started_at) if manifest.started_at is not None else run.started_at
    with rf.JsonlWriter(run_dir / layout.METRICS) as writer:
        for line in _lines(run, started):
            writer.write(line)

    def change(m: rf.Manifest) -> rf.Manifest:
        kept = tuple(a for a in m.artifacts if a.path != layout.METRICS)
        ended = max(run.ended_at, m.ended_at) if m.ended_at is not None else run.ended_at
        extra = {**m.extra, "imported_event_files": [str(f.resolve()) for f in run.files]}
        return m.replace(started_at=started, ended_at=ended, extra=extra,
                         artifacts=(*kept, rf.Artifact(kind=rf.ArtifactKind.METRICS, path=layout.METRICS)))

    return rf.update_manifest(run_dir, change)


def _make_event_run(root: Path, run: LogRun) -> Path:
    assert run.events is not None
    run_dir, _ = rf.create_run(
        root, run.name, command=("torchscope", "import", str(run.source)), tags=(IMPORTED_TAG,),
        extra={"imported_from": str(run.source.resolve())},
    )
    # The event files do not say where or how the job ran: the importer's host, folder and pid would be shown.
    rf.update_manifest(run_dir, status=rf.RunStatus.FINISHED, started_at=run.events.started_at,
                       heartbeat=None, pid=None, host=None, cwd=None, exit_code=None)
    write_event_metrics(run_dir, run.events)
    return run_dir


def import_log_plan(plan: LogImportPlan, root: str | os.PathLike[str]) -> list[Path]:
    """Create the runs of ``plan`` under the store ``root``; return the new run folders."""
    created = []
    for run in plan.runs:
        if run.traces is not None:
            (run_dir,) = tbprofiler.import_plan(ImportPlan((run.traces,), ()), root)
            if run.events is not None:
                write_event_metrics(run_dir, run.events)
        else:
            run_dir = _make_event_run(Path(root), run)
        created.append(run_dir)
    return created
