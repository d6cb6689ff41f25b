"""One step of a trace as drawable timeline lanes, and the ops around an instant (analysis layer).

Input is the ``events``/``threads`` tables of ``app.data.trace.TraceTables``. Lanes are host
threads and device streams, named and ordered by ``app.analysis.trace.lanes``; nested host ops
get a depth so that they stack like in Perfetto. A browser draws a few tens of thousands of
rectangles smoothly, so :func:`compute_timeline` keeps the longest ``max_events`` and reports
what it dropped.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.analysis.trace.lanes import DEVICE_CATEGORIES, compute_lane_labels
from app.analysis.trace.lanes import text_values as _text

__all__ = [
    "STEP_PATTERN",
    "DEVICE_CATEGORIES",
    "TIMELINE_COLUMNS",
    "Timeline",
    "compute_step_windows",
    "compute_timeline",
    "combine_timelines",
    "compute_ops_at",
    "host_ops",
]

STEP_PATTERN = r"^ProfilerStep#(\d+)$"
_LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "privateuse1_runtime"})
_HOST_OP_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function"})
# The profiler's own "PyTorch Profiler (0)" span covers the whole trace: a lane of no news.
_PROFILER_SPAN_CATEGORIES = frozenset({"Trace"})

TIMELINE_COLUMNS = ["lane", "depth", "name", "cat", "start_ms", "dur_us", "input_shapes"]


@dataclass(frozen=True)
class Timeline:
    """The drawable events of one window.

    ``events`` has TIMELINE_COLUMNS: ``start_ms`` is relative to ``start_us``; ``lanes`` lists
    lane names top to bottom (host threads, then device streams); ``total_events`` events
    overlapped the window, ``hidden_events`` of them were dropped (all no longer than
    ``hidden_max_dur_us``) to stay within the drawing budget.
    """

    events: pd.DataFrame
    lanes: list[str]
    start_us: float
    end_us: float
    total_events: int
    hidden_events: int
    hidden_max_dur_us: float

    @property
    def shown_events(self) -> int:
        return self.total_events - self.hidden_events


def compute_step_windows(events: pd.DataFrame) -> pd.DataFrame:
    """Return one row per ``ProfilerStep#N`` annotation: ``step``, ``start_us``, ``end_us``,
    ``duration_us``, sorted by step.

    ``end_us`` is extended to the end of the last device event launched from inside the step
    (kernels run after the host has moved on), so the window shows the step's whole GPU work.
    Empty when the trace has no step annotations. A step whose annotations have no positive,
    finite duration (a broken trace: every duration negative) has no window and is left out.
    """
    columns = ["step", "start_us", "end_us", "duration_us"]
    if events.empty:
        return pd.DataFrame(columns=columns)
    steps = _step_numbers(events["name"])
    marked = events.loc[steps.notna(), ["ts_us", "dur_us"]].assign(step=steps.dropna().astype(int))
    ts, dur = marked["ts_us"].to_numpy(np.float64), marked["dur_us"].to_numpy(np.float64)
    marked = marked[np.isfinite(ts) & np.isfinite(dur) & (dur > 0)]
    if marked.empty:
        return pd.DataFrame(columns=columns)
    marked["end_us"] = marked["ts_us"] + marked["dur_us"]
    windows = marked.groupby("step").agg(start_us=("ts_us", "min"), end_us=("end_us", "max")).reset_index()
    launch_ts, device_end = _launch_device_ends(events)
    tails = []
    for start, end in zip(windows["start_us"].to_numpy(), windows["end_us"].to_numpy()):
        inside = (launch_ts >= start) & (launch_ts < end)
        tails.append(max(end, float(np.nanmax(device_end[inside], initial=end))))
    windows["end_us"] = tails
    windows["duration_us"] = windows["end_us"] - windows["start_us"]
    return windows[columns].sort_values("step").reset_index(drop=True)


def _step_numbers(names: pd.Series) -> pd.Series:
    """The N of ``ProfilerStep#N`` per row (NaN elsewhere); parsed once per distinct name."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        parsed = pd.Series(names.cat.categories.astype(object)).astype(str).str.extract(STEP_PATTERN, expand=False)
        codes = names.cat.codes.to_numpy()
        values = np.where(codes >= 0, parsed.to_numpy(dtype=object)[codes], None)
        return pd.Series(values, index=names.index, dtype=object).astype(float)
    return names.astype(str).str.extract(STEP_PATTERN, expand=False).astype(float)


def _launch_device_ends(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(timestamp of each runtime launch, end of the device work it launched or NaN)."""
    if "correlation" not in events.columns:
        return np.empty(0), np.empty(0)
    cat = events["cat"]
    launches = events.loc[cat.isin(_LAUNCH_CATEGORIES), ["ts_us", "correlation"]]
    device = events.loc[cat.isin(DEVICE_CATEGORIES), ["ts_us", "dur_us", "correlation"]].dropna(subset=["correlation"])
    if launches.empty or device.empty:
        return np.empty(0), np.empty(0)
    ends = (device["ts_us"] + device["dur_us"]).groupby(device["correlation"].to_numpy()).max()
    mapped = launches["correlation"].map(ends)
    return launches["ts_us"].to_numpy(np.float64), pd.to_numeric(mapped, errors="coerce").to_numpy(np.float64)


def _depths(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Nesting depth of intervals sorted by (start, -duration): how many still-open intervals
    contain each start. O(n · depth) with a stack of open end times."""
    depth = np.zeros(len(starts), dtype=np.int32)
    stack: list[float] = []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        while stack and stack[-1] <= s:
            stack.pop()
        depth[i] = len(stack)
        stack.append(e)
    return depth


def compute_timeline(
    events: pd.DataFrame,
    threads: pd.DataFrame | None,
    start_us: float,
    end_us: float,
    *,
    max_events: int = 20_000,
    name_contains: str = "",
    lane_prefix: str = "",
) -> Timeline:
    """Return the events overlapping [start_us, end_us] laid out in lanes, at most
    ``max_events`` of them (the longest; shorter ones are counted in ``hidden_events``). The
    profiler's own whole-trace span (category "Trace") is left out. ``name_contains`` keeps
    only events whose name contains it (case-insensitive); ``lane_prefix`` is put before every
    lane name (e.g. "rank 3 · " when several ranks are drawn together).

    Raises ValueError when the window is empty or max_events < 1.
    """
    if not end_us > start_us:
        raise ValueError(f"timeline window must have end_us > start_us, got [{start_us}, {end_us}]")
    if max_events < 1:
        raise ValueError(f"max_events must be positive, got {max_events}")
    ends = events["ts_us"] + events["dur_us"].fillna(0.0)
    work = ~events["cat"].isin(_PROFILER_SPAN_CATEGORIES)
    if name_contains:
        work &= _name_matches(events["name"], name_contains)
    inside = events[(events["ts_us"] < end_us) & (ends > start_us) & work]
    total = len(inside)
    inside, hidden_max = _longest(inside, max_events)
    lane_labels = compute_lane_labels(inside, threads)
    frame = _laid_out(inside, lane_labels.per_event)
    frame["start_ms"] = (frame["ts_us"] - start_us) / 1000.0
    if lane_prefix:
        frame["lane"] = lane_prefix + frame["lane"]
    return Timeline(
        events=frame[TIMELINE_COLUMNS].reset_index(drop=True),
        lanes=[lane_prefix + lane for lane in lane_labels.order],
        start_us=float(start_us),
        end_us=float(end_us),
        total_events=total,
        hidden_events=total - len(frame),
        hidden_max_dur_us=hidden_max,
    )


def _longest(inside: pd.DataFrame, max_events: int) -> tuple[pd.DataFrame, float]:
    """The ``max_events`` longest events (in their order) and the longest duration left out (0 when none)."""
    if len(inside) <= max_events:
        return inside, 0.0
    order = np.argsort(-inside["dur_us"].to_numpy(np.float64), kind="stable")
    hidden_max = float(inside["dur_us"].iloc[order[max_events:]].max())
    return inside.iloc[np.sort(order[:max_events])], hidden_max


def _laid_out(inside: pd.DataFrame, lanes: pd.Series) -> pd.DataFrame:
    """The events as plain columns, sorted by lane and time, with their nesting ``depth`` per lane."""
    frame = pd.DataFrame(
        {
            "lane": lanes.to_numpy(),
            "name": _text(inside["name"]),
            "cat": _text(inside["cat"]),
            "ts_us": inside["ts_us"].to_numpy(np.float64),
            "dur_us": inside["dur_us"].fillna(0.0).to_numpy(np.float64),
            "input_shapes": _text(inside["input_shapes"]) if "input_shapes" in inside.columns else "",
        }
    )
    frame = frame.sort_values(["lane", "ts_us", "dur_us"], ascending=[True, True, False], kind="stable")
    depth = np.zeros(len(frame), dtype=np.int32)
    for positions in frame.groupby("lane", sort=False).indices.values():
        sub = frame.iloc[positions]
        depth[positions] = _depths(sub["ts_us"].to_numpy(), (sub["ts_us"] + sub["dur_us"]).to_numpy())
    frame["depth"] = depth
    return frame


def _name_matches(names: pd.Series, needle: str) -> np.ndarray:
    """Case-insensitive substring match, tested once per distinct name of a categorical."""
    needle = needle.lower()
    if isinstance(names.dtype, pd.CategoricalDtype):
        hit = np.array([needle in str(c).lower() for c in names.cat.categories] + [False])
        codes = names.cat.codes.to_numpy()
        return hit[np.where(codes >= 0, codes, len(hit) - 1)]
    return np.asarray(names.astype(str).str.lower().str.contains(needle, regex=False).to_numpy(), dtype=bool)


def combine_timelines(timelines: list[Timeline]) -> Timeline:
    """Stack timelines (e.g. the same step on several ranks, each with its own lane prefix)
    into one: each keeps its own time origin (its window start), so they line up at the start
    of the window; counts add up, ``start_us`` is 0 and ``end_us`` the longest window."""
    if not timelines:
        raise ValueError("combine_timelines needs at least one timeline")
    return Timeline(
        events=pd.concat([t.events for t in timelines], ignore_index=True),
        lanes=[lane for t in timelines for lane in t.lanes],
        start_us=0.0,
        end_us=max(t.end_us - t.start_us for t in timelines),
        total_events=sum(t.total_events for t in timelines),
        hidden_events=sum(t.hidden_events for t in timelines),
        hidden_max_dur_us=max(t.hidden_max_dur_us for t in timelines),
    )


def host_ops(events: pd.DataFrame) -> pd.DataFrame:
    """The host-side op events (CPU ops, user annotations, Python functions), without the
    ``ProfilerStep#N`` markers."""
    keep = events["cat"].isin(_HOST_OP_CATEGORIES).to_numpy() & _step_numbers(events["name"]).isna().to_numpy()
    return events[keep]


def compute_ops_at(events: pd.DataFrame, ts_us: float, *, before: int = 10) -> pd.DataFrame:
    """Return the host ops around the instant ``ts_us`` (e.g. a memory peak).

    Rows are the ops whose interval contains the instant (``relation`` "running", outermost
    first) followed by the ``before`` ops that ended last before it ("ended before", most
    recent first). Columns: ``relation``, ``name``, ``ts_us``, ``dur_us``, ``ends_before_us``
    (how long before the instant the op ended; 0 for running ops), ``input_shapes``.
    """
    columns = ["relation", "name", "ts_us", "dur_us", "ends_before_us", "input_shapes"]
    if events.empty:
        return pd.DataFrame(columns=columns)
    ops = host_ops(events)
    end = ops["ts_us"] + ops["dur_us"].fillna(0.0)
    running = ops[(ops["ts_us"] <= ts_us) & (end >= ts_us)].sort_values("dur_us", ascending=False)
    ended = ops[end < ts_us].assign(_end=end[end < ts_us]).nlargest(before, "_end")
    shapes = "input_shapes" in ops.columns

    def rows(frame: pd.DataFrame, relation: str, gap: pd.Series | float) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "relation": relation,
                "name": _text(frame["name"]),
                "ts_us": frame["ts_us"].to_numpy(np.float64),
                "dur_us": frame["dur_us"].to_numpy(np.float64),
                "ends_before_us": np.asarray(gap, dtype=np.float64) * np.ones(len(frame)),
                "input_shapes": _text(frame["input_shapes"]) if shapes else "",
            }
        )

    parts = [rows(running, "running", 0.0), rows(ended, "ended before", ts_us - ended["_end"])]
    return pd.concat(parts, ignore_index=True)[columns]
