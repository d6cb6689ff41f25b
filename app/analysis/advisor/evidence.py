"""A RunEvidence from already-loaded data: a run's records and tables, or bare traces (analysis layer).

Loading the evidence of a reference (a run folder, id or name, a trace path) is the workspace's:
app.workspace.evidence.load_evidence.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.analysis.trace.summary import TraceAnalysis, analyze_traces
from app.analysis.trace.windows import windows_from_profiler
from app.data.runs import RunData
from app.data.trace import TraceTables

from .model import RunEvidence

__all__ = ["evidence_from_run", "evidence_from_traces"]


def _analyze(traces: Sequence[TraceTables]) -> TraceAnalysis | None:
    return analyze_traces(traces) if traces else None


def evidence_from_traces(traces: Sequence[TraceTables], *, source: str,
                         analysis: TraceAnalysis | None = None) -> RunEvidence:
    """Evidence for bare traces (no manifest, no curves): only trace rules can speak."""
    return RunEvidence(source=source, has_run=False, traces=tuple(traces),
                       analysis=analysis if analysis is not None else _analyze(traces),
                       problems=_trace_warnings(traces))


def _trace_warnings(traces: Sequence[TraceTables]) -> tuple[str, ...]:
    return tuple(f"{Path(str(getattr(t, 'path', '?'))).name}: {w}" for t in traces for w in getattr(t, "warnings", ()))


def evidence_from_run(run: RunData, *, traces: Sequence[TraceTables] = (), analysis: TraceAnalysis | None = None,
                      module_tree: dict[str, Any] | None = None, problems: Sequence[str] = ()) -> RunEvidence:
    """Evidence for a loaded run with its loaded ``traces`` (their ``analysis`` is computed when
    None), module tree and the loader's ``problems`` (e.g. "traces not used: ..."), listed after
    the run's own problems and before the traces' warnings."""
    found: list[str] = [*run.problems, *problems, *_trace_warnings(traces)]
    if analysis is None:
        analysis = _analyze(traces)
    m = run.manifest
    return RunEvidence(
        source=str(run.path), has_run=True, config=dict(m.config), devices=tuple(m.devices),
        world_size=m.world_size, metrics=run.metrics, system=run.system, traces=tuple(traces),
        analysis=analysis, module_tree=module_tree, problems=tuple(found),
        threads=dict(m.extra.get("threads") or {}) if isinstance(m.extra.get("threads"), dict) else {},
        windows=windows_from_profiler(m.extra.get("profiler")),
    )
