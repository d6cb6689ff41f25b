"""The advisor's evidence of a reference: a run folder, id or name, a trace file or folder of traces (workspace layer)."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from app.analysis.advisor import Advice, advise
from app.analysis.advisor.evidence import evidence_from_run, evidence_from_traces
from app.analysis.advisor.model import RunEvidence
from app.analysis.trace.summary import TraceAnalysis
from app.data import runs as runs_data
from app.data.trace import TraceTables
from app.errors import TraceError
from app.workspace import refs
from app.workspace.profiled_windows import analyze_run_traces
from app.workspace.sides import run_windows
from app.workspace.traces import analyze_trace_set, load_trace_set
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["load_evidence", "load_run_evidence", "advise_path"]


def _run_traces(run_dir: Path) -> list[TraceTables]:
    if not layout.list_trace_files(run_dir):
        return []
    return load_trace_set(run_dir)


def load_run_evidence(run: runs_data.RunData, *, traces: Sequence[TraceTables] | None = None,
                      analysis: TraceAnalysis | None = None) -> RunEvidence:
    """Evidence for a loaded run; ``traces``/``analysis`` are loaded from the run when None.

    An unreadable trace does not stop the advice: the curve and config rules still run, and the
    trace's error is listed in ``problems``. An unreadable module tree is left out.
    """
    problems: list[str] = []
    if traces is None:
        try:
            traces = _run_traces(run.path)
        except TraceError as e:
            traces = []
            problems.append(f"traces not used: {e}")
    if analysis is None and traces:
        # The op and kernel tables over the typical windows (anomaly windows apart: profiled_windows).
        analysis = analyze_run_traces(traces, run_windows(run))
    try:
        module_tree = runs_data.load_module_tree(run.path)
    except rf.CorruptFileError:
        module_tree = None
    return evidence_from_run(run, traces=traces, analysis=analysis, module_tree=module_tree, problems=problems)


def load_evidence(ref: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> RunEvidence:
    """Evidence for ``ref``: a run folder, a trace file or folder of traces, or a run id/name in ``root``.

    Raises RunNotFoundError when ``ref`` is neither a path nor a known run, TraceError for an
    unreadable trace, UsageError for a path without traces, and the run format's errors for a
    broken manifest.
    """
    found = refs.resolve_ref(ref, root)
    if found.kind is refs.RefKind.RUN:
        return load_run_evidence(runs_data.load_run(found.path))
    traces = load_trace_set(found.path)
    refs.require_traces(found.path, traces)
    return evidence_from_traces(traces, source=str(found.path), analysis=analyze_trace_set(traces))


def advise_path(ref: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> Advice:
    """Load ``ref`` (run folder, run id/name, trace file or folder of traces) and advise on it."""
    return advise(load_evidence(ref, root=root))
