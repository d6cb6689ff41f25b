"""Progress of a long read for people: done/total and the time left (presentation layer; no project imports).

Used by the CLI's progress bar (app/cli/progress.py) and the Run page's first read of a big trace
(app/ui/trace_view.py). The time left extrapolates the rate since the start, which suits the trace
reader, whose cost grows linearly with the bytes (docs/trace-engine.md, "Gigabyte traces").
"""
from __future__ import annotations

__all__ = ["eta_seconds", "progress_text"]

_MIB = 1 << 20


def eta_seconds(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at the rate so far; None before a rate is known (nothing done, under 0.2 s)."""
    if done <= 0 or elapsed_s < 0.2 or total <= 0:
        return None
    return max(0.0, elapsed_s * (total - done) / done)


def progress_text(done: int, total: int, elapsed_s: float) -> str:
    """``120 of 1,000 MiB, 3 s, about 22 s left`` (``finishing`` once every byte is read)."""
    text = f"{done / _MIB:,.0f} of {total / _MIB:,.0f} MiB, {elapsed_s:,.0f} s"
    if done >= total:
        return f"{text}, finishing"
    eta = eta_seconds(done, total, elapsed_s)
    return text if eta is None else f"{text}, about {eta:,.0f} s left"
