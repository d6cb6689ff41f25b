"""A time range of a Chrome/Kineto trace document as a trace document of its own (analysis layer).

What the Timeline tab's "Download this range" button writes: the events of the range, in the
same JSON format as the source, so the Perfetto UI, ``chrome://tracing``, TensorBoard and HTA
open it. Pure: a parsed document in, a new document out.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["select_trace_range"]

# Phases with a duration: kept when they overlap the range. Metadata ("M") is always kept: it
# names the processes, threads and streams. Everything else is kept when its instant is inside.
_DURATION_PHASES = frozenset({"X"})


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None  # NaN is no timestamp


def select_trace_range(doc: Mapping[str, Any], start_us: float, end_us: float) -> dict[str, Any]:
    """Return a copy of ``doc`` (a trace file's top-level object) whose ``traceEvents`` are its
    metadata events (``ph`` "M", always), its complete events (``ph`` "X") that overlap
    [start_us, end_us], and its other events (instants, counters, flow ends, async ends) whose
    ``ts`` lies inside it, in their order. Every other top-level field (``deviceProperties``,
    ``distributedInfo``, ``displayTimeUnit``...) is kept as it is. Timestamps are the file's own
    (µs, as Kineto writes them), unchanged, so the range lines up with the source.

    Raises ValueError when end_us <= start_us or the document has no ``traceEvents`` list.
    """
    if not end_us > start_us:
        raise ValueError(f"trace range must have end_us > start_us, got [{start_us}, {end_us}]")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError("the trace document has no traceEvents list")
    kept: list[Any] = []
    for event in events:
        if not isinstance(event, Mapping):
            continue
        ph = event.get("ph")
        if ph == "M":
            kept.append(event)
            continue
        ts = _number(event.get("ts"))
        if ts is None:
            continue
        if ph in _DURATION_PHASES:
            dur = _number(event.get("dur")) or 0.0
            if ts < end_us and ts + max(dur, 0.0) >= start_us:
                kept.append(event)
        elif start_us <= ts <= end_us:
            kept.append(event)
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = kept
    return out
