"""Small helpers shared by the advisor's rule families: curves, step shares, config look-ups (analysis layer)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from .model import MissingEvidence, RunEvidence, Severity

__all__ = [
    "require_run",
    "require_steps",
    "require_device_trace",
    "metric_curve",
    "step_share",
    "config_value",
    "severity_for",
    "fmt_pct",
    "fmt_ms",
    "events_of",
    "DOCS",
]

# PyTorch documentation pages the findings link to (one place, so a moved page is one edit).
DOCS = {
    "dataloader": "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading",
    "amp": "https://pytorch.org/docs/stable/amp.html",
    "pinned": "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
    "tuning": "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
    "compile": "https://pytorch.org/docs/stable/torch.compiler.html",
    "cuda_graphs": "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",
    "memory": "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
    "checkpoint": "https://pytorch.org/docs/stable/checkpoint.html",
    "no_grad": "https://pytorch.org/docs/stable/generated/torch.no_grad.html",
    "optim": "https://pytorch.org/docs/stable/optim.html#algorithms",
    "clip": "https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html",
    "anomaly": "https://pytorch.org/docs/stable/autograd.html#anomaly-detection",
    "lr_schedule": "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
    "ddp_instead": "https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel",
    "ddp": "https://pytorch.org/docs/stable/notes/ddp.html",
    "threads": "https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html",
    "weight_decay": "https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html",
}


def require_run(ev: RunEvidence, what: str = "curves and config") -> None:
    """Raise MissingEvidence when the evidence is a bare trace (no run folder)."""
    if not ev.has_run:
        raise MissingEvidence(f"needs {what} of a recorded run; a bare trace has none")


def require_steps(ev: RunEvidence, *columns: str) -> pd.DataFrame:
    """The step table with ``columns`` present and at least one step with positive duration."""
    steps = ev.steps
    missing = [c for c in ("duration_us", *columns) if c not in steps.columns]
    if steps.empty or missing:
        raise MissingEvidence("needs profiler steps (ProfilerStep#N) in a trace")
    steps = steps[pd.to_numeric(steps["duration_us"], errors="coerce") > 0]
    if steps.empty:
        raise MissingEvidence("the trace's profiler steps have no duration")
    return steps


def require_device_trace(ev: RunEvidence) -> None:
    """Raise MissingEvidence unless some trace has GPU kernels."""
    if not ev.traces:
        raise MissingEvidence("needs a profiler trace")
    if not ev.has_device_trace:
        raise MissingEvidence("needs a GPU trace (kernels); this run's traces are CPU-only")


def metric_curve(ev: RunEvidence, key: str, *, min_points: int = 1) -> pd.DataFrame:
    """``step`` and ``value`` of one logged metric for the lowest rank, rows where it was logged.

    ±Inf values are kept; NaN rows are dropped (after the table is built a NaN cannot be told
    from "not logged"; the NaN-loss rule reads the rows itself).
    Raises MissingEvidence when the key was not logged at least ``min_points`` times.
    """
    require_run(ev, "logged curves")
    m = ev.metrics
    if m is None or m.empty or key not in m.columns:
        raise MissingEvidence(f"needs the logged metric {key!r}")
    if "rank" in m.columns and m["rank"].notna().any():
        m = m[m["rank"] == m["rank"].min()]
    values = pd.to_numeric(m[key], errors="coerce")
    out = pd.DataFrame({"step": pd.to_numeric(m["step"], errors="coerce"), "value": values})
    out = out[out["value"].notna()].dropna(subset=["step"])
    if len(out) < min_points:
        raise MissingEvidence(f"needs at least {min_points} logged values of {key!r} (has {len(out)})")
    return out.sort_values("step", kind="stable").reset_index(drop=True)


def step_share(steps: pd.DataFrame, column: str) -> float:
    """Sum of ``column`` over all steps divided by the sum of step durations."""
    total = float(pd.to_numeric(steps["duration_us"], errors="coerce").sum())
    part = float(pd.to_numeric(steps[column], errors="coerce").fillna(0).sum())
    return part / total if total > 0 else 0.0


def config_value(config: Mapping[str, Any], *names: str) -> Any:
    """The first config value whose key, normalised (lower case, '-' → '_'), is in ``names``."""
    wanted = {n.lower().replace("-", "_") for n in names}
    for k, v in config.items():
        if str(k).lower().replace("-", "_").lstrip("_") in wanted:
            return v
    return None


def as_number(v: Any) -> float | None:
    """``v`` as a finite float, or None (bools count as 0/1)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def severity_for(value: float, *, high: float, medium: float) -> Severity:
    """HIGH when ``value`` ≥ ``high``, MEDIUM when ≥ ``medium``, else LOW."""
    if value >= high:
        return Severity.HIGH
    if value >= medium:
        return Severity.MEDIUM
    return Severity.LOW


def fmt_pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def fmt_ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


def events_of(ev: RunEvidence) -> Iterable[tuple[int, pd.DataFrame]]:
    """(rank, events table) per rank; a rank with several traces (several profiler windows)
    gets their events together, so per-step counts divide by all of that rank's steps."""
    by_rank: dict[int, list[pd.DataFrame]] = {}
    for t in ev.traces:
        events = getattr(t, "events", None)
        if events is not None and len(events):
            by_rank.setdefault(int(getattr(t, "rank", 0) or 0), []).append(events)
    for rank, frames in sorted(by_rank.items()):
        yield rank, frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
