"""Collect a RunEvidence from a run folder, a run reference or a trace path (analysis layer, reads via app.data)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from app.data import runs as runs_data
from app.errors import TraceError, UsageError
from profiler_agent import runformat as rf

from .model import RunEvidence

__all__ = ["load_evidence", "evidence_from_run", "evidence_from_traces"]


def _analyze(traces: list[Any]) -> Any:
    from app.analysis.trace.summary import analyze_traces

    return analyze_traces(traces) if traces else None


def evidence_from_traces(traces: list[Any], *, source: str, analysis: Any = None) -> RunEvidence:
    """Evidence for bare traces (no manifest, no curves): only trace rules can speak."""
    return RunEvidence(source=source, has_run=False, traces=tuple(traces),
                       analysis=analysis if analysis is not None else _analyze(traces),
                       problems=_trace_warnings(traces))


def _trace_warnings(traces: list[Any]) -> tuple[str, ...]:
    return tuple(f"{Path(str(getattr(t, 'path', '?'))).name}: {w}" for t in traces for w in getattr(t, "warnings", ()))


def evidence_from_run(run: runs_data.RunData, *, traces: list[Any] | None = None, analysis: Any = None,
                      module_tree: Any = None) -> RunEvidence:
    """Evidence for a loaded run; ``traces``/``analysis`` are loaded from the run when None.

    An unreadable trace does not stop the advice: the curve and config rules still run, and the
    trace's error is listed in ``problems``.
    """
    problems: list[str] = list(run.problems)
    if traces is None:
        try:
            traces = _load_run_traces(run.path)
        except TraceError as e:
            traces = []
            problems.append(f"traces not used: {e}")
    problems.extend(_trace_warnings(traces))
    if analysis is None:
        analysis = _analyze(traces)
    if module_tree is None:
        try:
            module_tree = runs_data.load_module_tree(run.path)
        except rf.CorruptFileError:
            module_tree = None
    m = run.manifest
    return RunEvidence(
        source=str(run.path), has_run=True, config=dict(m.config), devices=tuple(m.devices),
        world_size=m.world_size, metrics=run.metrics, system=run.system, traces=tuple(traces),
        analysis=analysis, module_tree=module_tree, problems=tuple(problems),
        threads=dict(m.extra.get("threads") or {}) if isinstance(m.extra.get("threads"), dict) else {},
    )


def _load_run_traces(run_dir: Path) -> list[Any]:
    from app.data.trace import load_traces

    from profiler_agent.runformat import layout

    if not layout.list_trace_files(run_dir):
        return []
    return load_traces(run_dir)


def load_evidence(ref: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> RunEvidence:
    """Evidence for ``ref``: a run folder, a trace file or folder of traces, or a run id/name in ``root``.

    Raises RunNotFoundError when ``ref`` is neither a path nor a known run, TraceError for an
    unreadable trace, and the run format's errors for a broken manifest.
    """
    path = Path(ref)
    if rf.is_run_dir(path):
        return evidence_from_run(runs_data.load_run(path))
    if path.exists():
        from app.data.trace import load_traces

        traces = load_traces(path)
        if not traces:
            raise UsageError(f"{path}: no profiler traces found")
        return evidence_from_traces(traces, source=str(path))
    return evidence_from_run(runs_data.load_run(rf.find_run(ref, root)))
