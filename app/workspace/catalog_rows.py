"""One catalog row per run, computed from the raw records without pandas (workspace layer).

The Runs page and ``torchscope ls`` summarise every run of a store; building DataFrames for
each small run costs ~20 ms, plain Python over the JSON-lines records ~1 ms, which is what
makes a cold store of 1,000 runs list in seconds. The rules (which step times, which memory
column) are documented in docs/app.md and shared with the Overview tab: the step time through
app.analysis.run.step_time, the final loss through app.analysis.run.final_value, the peak through
app.data.store_rows.peak_memory_from_records.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.analysis.run.final_value import NOT_OUTCOMES, final_value
from app.analysis.run.step_time import steady_step_time
from app.data.store_rows import peak_memory_from_records, record_number, record_rank, run_group, search_text
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["load_run_row", "load_run_entry", "row_from_records", "final_values", "RunEntry"]


def _step_stats(metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    numbered = [(step, r) for r in metrics if record_rank(r) == 0 and (step := record_number(r.get("step"))) is not None]
    rank0 = sorted(numbered, key=lambda sr: sr[0])
    # Count training steps only: an evaluation line (val_loss) is written at the step *after*
    # the last optimizer step when the job evaluates at its end.
    trained = [(s, r) for s, r in rank0 if any(k in r for k in ("loss", "step_time_s", "lr"))] or rank0
    steps = int(max(s for s, _ in trained)) + 1 if trained else None
    # The final loss: median of the last window of rank 0's values (app.analysis.run.final_value).
    final = final_value(metrics, "loss")
    # The headline step time: the steady-state median (app.analysis.run.step_time), every rank.
    headline = steady_step_time(metrics)
    return {
        "steps": steps,
        "final_loss": final.value if final is not None else None,
        "step_time_s": headline.value_s,
        "mean_step_time_s": headline.mean_s,
        "step_time_steps": headline.n_used if headline.value_s is not None else None,
        "samples_per_s": headline.samples_per_s,
    }


def row_from_records(
    path: Path,
    manifest: rf.Manifest,
    status: rf.RunStatus,
    metrics: Sequence[Mapping[str, Any]],
    system: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The catalog row (STORE_COLUMNS + EXTRA_COLUMNS of app.data.runs) of one run."""
    m = manifest
    peak, _ = peak_memory_from_records(system)
    if peak is None:  # a trace-only import: no system samples, its traces' peak was recorded at import
        peak = _imported_peak(m)
    steps = _step_stats(metrics)
    # Metrics without step times (TensorBoard scalars imported beside traces) leave the steps to the traces.
    if steps["step_time_s"] is not None or (steps["steps"] is not None and not layout.list_trace_files(path)):
        source = "metrics"
    else:  # listing the traces folder is one directory read; no trace is opened here
        source = "in trace" if layout.list_trace_files(path) else ""
    row: dict[str, Any] = {
        "id": m.id,
        "name": m.name,
        "status": str(status),
        "started_at": m.started_at,  # epoch seconds; app.data.runs turns the column into UTC times
        "duration_s": m.duration_s,
        **steps,
        "steps_source": source,
        "peak_memory_bytes": peak,
        # No devices recorded (an imported trace without deviceProperties) is unknown, not "cpu":
        # such traces often hold GPU kernels.
        "device": ", ".join(str(d.get("name", d.get("type", "?"))) for d in m.devices),
        "tags": ", ".join(m.tags),
        "group": run_group(m),
        "git_commit": str(m.git.get("commit") or "")[:10],
        "path": str(path),
        "notes": m.notes,
        "world_size": m.world_size,
        "search_text": search_text(m),
    }
    return row


# app.workspace.imports.SUMMARY_KEY (not imported here: that module loads the importers).
_TRACE_SUMMARY = "trace_summary"


def _imported_peak(manifest: rf.Manifest) -> int | None:
    """The traces' allocated peak (bytes) that ``torchscope import`` keeps in the manifest's
    ``extra.trace_summary``, or None (not an import, or no memory events in its traces)."""
    summary = manifest.extra.get(_TRACE_SUMMARY) if isinstance(manifest.extra, Mapping) else None
    value = record_number(summary.get("peak_memory_bytes")) if isinstance(summary, Mapping) else None
    return int(value) if value is not None and value >= 0 else None


@dataclass(frozen=True)
class RunEntry:
    """What the catalog index keeps of one run: its row, problems, config and final values."""

    row: dict[str, Any]
    problems: list[str]
    config: dict[str, Any]
    finals: dict[str, float]


def final_values(metrics: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The final value (app.analysis.run.final_value) of every outcome logged in ``metrics``
    (``loss``, ``val_loss``, ``accuracy``...; not steps, times, learning rates: NOT_OUTCOMES)."""
    keys: dict[str, None] = {}
    for r in metrics:
        for k, v in r.items():
            if k not in NOT_OUTCOMES and k not in keys and record_number(v) is not None:
                keys[k] = None
    out: dict[str, float] = {}
    for k in keys:
        found = final_value(metrics, k)
        if found is not None and found.value is not None:
            out[k] = float(found.value)
    return out


def load_run_entry(run_dir: str | os.PathLike[str], *, now: float | None = None) -> RunEntry:
    """The run's catalog row and problems (as :func:`load_run_row`) with its config and final values.

    Raises the run format's errors for the manifest, as :func:`load_run_row`."""
    run_dir = Path(run_dir)
    manifest = rf.read_manifest(run_dir)
    rf.remove_orphaned_temp_files(run_dir, manifest)  # left by a SIGKILLed launcher; no writer is left
    metrics = rf.read_samples(run_dir / layout.METRICS)
    system = rf.read_samples(run_dir / layout.SYSTEM)
    row = row_from_records(
        run_dir, manifest, rf.effective_status(manifest, now=now), metrics.records, system.records
    )
    problems = [f"{run_dir.name}: {p}" for p in (*metrics.skipped, *system.skipped)]
    return RunEntry(row=row, problems=problems, config=dict(manifest.config), finals=final_values(metrics.records))


def load_run_row(
    run_dir: str | os.PathLike[str], *, now: float | None = None
) -> tuple[dict[str, Any], list[str]]:
    """(catalog row, problems) of one run, reading run.json, metrics.jsonl and system.jsonl.

    Raises the run format's errors for the manifest (NotARunError, CorruptFileError,
    SchemaVersionError); bad lines of the JSON-lines files become problem messages.
    """
    entry = load_run_entry(run_dir, now=now)
    return entry.row, entry.problems
