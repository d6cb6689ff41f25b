"""One step of a trace as drawable timeline lanes, and the ops around an instant (analysis layer).

Input is the ``events``/``threads`` tables of ``app.data.trace.TraceTables``. Lanes are host
threads and device streams, named and ordered by ``app.analysis.trace.lanes``; nested host ops
get a depth so that they stack like in Perfetto. :func:`compute_timeline` is the one place of
level of detail: slices narrower than a pixel at the current zoom are merged per row and the
result never holds more than ``max_events`` shapes (``SHAPE_BOUND``, 5,000, by default), whatever
the trace's size; it says what it merged, folded and left out.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from app.analysis.trace.lanes import DEVICE_CATEGORIES, compute_lane_labels
from app.analysis.trace.lanes import text_values as _text
from app.analysis.trace.timeline_detail import (
    MAX_FLOWS,
    SHAPE_BOUND,
    bound_shapes,
    compute_flows,
    merge_subpixel,
)

__all__ = [
    "STEP_PATTERN",
    "DEVICE_CATEGORIES",
    "TIMELINE_COLUMNS",
    "FLOW_COLUMNS",
    "SHAPE_BOUND",
    "Timeline",
    "compute_activity_span",
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

TIMELINE_COLUMNS = ["lane", "depth", "name", "cat", "start_ms", "end_ms", "dur_us", "input_shapes", "count"]
FLOW_COLUMNS = ["from_lane", "from_depth", "from_ms", "to_lane", "to_depth", "to_ms"]


@dataclass(frozen=True)
class Timeline:
    """The drawable shapes of one window.

    ``events`` has TIMELINE_COLUMNS, one row per shape: ``start_ms``/``end_ms`` are relative to
    ``start_us`` and clipped to the window, ``dur_us`` is the event's own duration (a merged
    shape's span), ``count`` the events a shape stands for (1 for a real slice; more for a run
    of slices narrower than ``resolution_us``, merged). ``lanes`` lists the lanes drawn, top to
    bottom (host threads, then device streams); ``all_lanes`` every lane of the window before
    the lane filter, ``matched_lanes`` how many passed it (``lanes`` may be a page of them). Of the ``total_events`` events in the window, ``folded_events`` were nested
    deeper than the chosen depth and ``hidden_events`` (none wider than ``hidden_max_dur_us``)
    did not fit the shape bound. ``flows`` (FLOW_COLUMNS) are launch → device-event arrows.
    """

    events: pd.DataFrame
    lanes: list[str]
    start_us: float
    end_us: float
    total_events: int
    hidden_events: int
    hidden_max_dur_us: float
    folded_events: int = 0
    resolution_us: float = 0.0
    all_lanes: tuple[str, ...] = ()
    matched_lanes: int = 0
    flows: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FLOW_COLUMNS))

    @property
    def shown_events(self) -> int:
        """Events drawn, alone or inside a merged shape."""
        return self.total_events - self.hidden_events - self.folded_events

    @property
    def merged_events(self) -> int:
        """Events drawn inside merged shapes (``count`` > 1)."""
        counts = self.events["count"]
        return int(counts[counts > 1].sum())

    @property
    def shapes(self) -> int:
        """Shapes the figure draws: slices (merged or not) and flow arrows."""
        return len(self.events) + len(self.flows)


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
    max_events: int = SHAPE_BOUND,
    width_px: int = 1600,
    name_contains: str = "",
    lane_prefix: str = "",
    lanes: Collection[str] | None = None,
    lane_contains: str = "",
    hidden_lanes: Collection[str] = (),
    lane_slice: tuple[int, int] | None = None,
    max_depth: int | None = None,
    flows: bool = False,
) -> Timeline:
    """Return the events overlapping [start_us, end_us] laid out in lanes, as at most
    ``max_events`` shapes (slices and flow arrows together), whatever the trace's size.

    Slices narrower than a pixel of a ``width_px`` wide drawing are merged per row
    (timeline_detail.merge_subpixel); the widest shapes are kept if that is still too many. The
    profiler's own whole-trace span (category "Trace") is left out. ``name_contains`` keeps only
    events whose name contains it (case-insensitive); ``lanes`` keeps only those lanes (names
    without ``lane_prefix``), ``lane_contains`` only lanes whose name contains it, ``hidden_lanes``
    leaves those out, and ``lane_slice`` = (a, b) then draws the lanes a..b-1 of what is left (a
    page of lanes: ``matched_lanes`` says how many there are); ``max_depth`` draws that many nesting levels per lane (1: the
    outermost slices only); ``flows`` adds launch → device-event arrows; ``lane_prefix`` is put
    before every lane name (e.g. "rank 3 · " when several ranks are drawn together).

    Raises ValueError when the window is empty, max_events < 1 or width_px < 1.
    """
    if not end_us > start_us:
        raise ValueError(f"timeline window must have end_us > start_us, got [{start_us}, {end_us}]")
    if max_events < 1 or width_px < 1:
        raise ValueError(f"max_events and width_px must be positive, got {max_events} and {width_px}")
    ends = events["ts_us"] + events["dur_us"].fillna(0.0)
    work = ~events["cat"].isin(_PROFILER_SPAN_CATEGORIES)
    if name_contains:
        work &= _name_matches(events["name"], name_contains)
    inside = events[(events["ts_us"] < end_us) & (ends > start_us) & work]
    lane_labels = compute_lane_labels(inside, threads)
    all_lanes = tuple(lane_labels.order)
    order = _chosen_lanes(all_lanes, lanes, lane_contains, hidden_lanes)
    matched = len(order)
    if lane_slice is not None:
        order = order[max(0, lane_slice[0]):max(0, lane_slice[1])]
    per_event = lane_labels.per_event
    if len(order) < len(all_lanes):
        keep = per_event.isin(set(order)).to_numpy()
        inside, per_event = inside[keep], per_event[keep]
    total = len(inside)
    laid = _laid_out(inside, per_event)
    arrows = _flows(laid, start_us, min(MAX_FLOWS, max_events // 10)) if flows else pd.DataFrame(columns=FLOW_COLUMNS)
    folded = 0
    if max_depth is not None:
        deep = laid["depth"].to_numpy() >= max(1, max_depth)
        folded = int(deep.sum())
        laid = laid[~deep]
        for col in ("from_depth", "to_depth"):  # a folded launch points from its outermost drawn parent's row
            arrows[col] = np.minimum(arrows[col].to_numpy(np.int64), max(1, max_depth) - 1)
    resolution = (end_us - start_us) / width_px
    laid = laid.assign(ts_us=np.maximum(laid["ts_us"].to_numpy(np.float64), start_us),
                       end_us=np.minimum((laid["ts_us"] + laid["dur_us"]).to_numpy(np.float64), end_us))
    merged = merge_subpixel(laid[["lane", "depth", "name", "cat", "ts_us", "end_us", "dur_us", "input_shapes"]],
                            resolution)
    shown, hidden, hidden_max = bound_shapes(merged, max_events - len(arrows))
    frame = shown.assign(start_ms=(shown["ts_us"] - start_us) / 1000.0, end_ms=(shown["end_us"] - start_us) / 1000.0)
    frame = frame.sort_values(["lane", "start_ms", "depth"], kind="stable")
    if lane_prefix:
        frame["lane"] = lane_prefix + frame["lane"]
        for col in ("from_lane", "to_lane"):
            arrows[col] = lane_prefix + arrows[col].astype(str)
    return Timeline(
        events=frame[TIMELINE_COLUMNS].reset_index(drop=True),
        lanes=[lane_prefix + lane for lane in order],
        start_us=float(start_us),
        end_us=float(end_us),
        total_events=total,
        hidden_events=hidden,
        hidden_max_dur_us=hidden_max,
        folded_events=folded,
        resolution_us=float(resolution),
        all_lanes=all_lanes,
        matched_lanes=matched,
        flows=arrows,
    )


def _chosen_lanes(all_lanes: tuple[str, ...], lanes: Collection[str] | None, contains: str,
                  hidden: Collection[str]) -> list[str]:
    """The lanes that pass the filters, in drawing order."""
    wanted = set(lanes) if lanes is not None else None
    gone, needle = set(hidden), contains.strip().lower()
    return [lane for lane in all_lanes
            if (wanted is None or lane in wanted) and lane not in gone and needle in lane.lower()]


def _flows(laid: pd.DataFrame, start_us: float, max_flows: int) -> pd.DataFrame:
    """Launch → device-event arrows of the window, in ms from its start (FLOW_COLUMNS)."""
    found = compute_flows(laid, max_flows) if max_flows > 0 else pd.DataFrame()
    if found.empty:
        return pd.DataFrame(columns=FLOW_COLUMNS)
    return pd.DataFrame({
        "from_lane": found["from_lane"], "from_depth": found["from_depth"],
        "from_ms": (found["from_us"] - start_us) / 1000.0, "to_lane": found["to_lane"],
        "to_depth": found["to_depth"], "to_ms": (found["to_us"] - start_us) / 1000.0,
    })[FLOW_COLUMNS]


def compute_activity_span(events: pd.DataFrame, start_us: float, end_us: float) -> tuple[float, float]:
    """(first start, last end) of the work inside [start_us, end_us], clipped to it: every event
    but the ``ProfilerStep#N`` markers and the profiler's own span. A step of 13 s whose work
    took 1.5 ms (a trace that slept inside its step) gets the 1.5 ms, so a view can open on the
    work instead of a blank band. The window itself when it holds no such event."""
    ends = events["ts_us"] + events["dur_us"].fillna(0.0)
    work = ~events["cat"].isin(_PROFILER_SPAN_CATEGORIES).to_numpy() & _step_numbers(events["name"]).isna().to_numpy()
    inside = work & (events["ts_us"] < end_us).to_numpy() & (ends > start_us).to_numpy()
    if not inside.any():
        return float(start_us), float(end_us)
    lo = max(float(start_us), float(events["ts_us"].to_numpy()[inside].min()))
    hi = min(float(end_us), float(ends.to_numpy()[inside].max()))
    return (lo, hi) if hi > lo else (float(start_us), float(end_us))


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
            "correlation": (pd.to_numeric(inside["correlation"], errors="coerce").to_numpy(np.float64)
                            if "correlation" in inside.columns else np.nan),
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
    flows = [t.flows for t in timelines if len(t.flows)]
    return Timeline(
        events=pd.concat([t.events for t in timelines], ignore_index=True),
        lanes=[lane for t in timelines for lane in t.lanes],
        start_us=0.0,
        end_us=max(t.end_us - t.start_us for t in timelines),
        total_events=sum(t.total_events for t in timelines),
        hidden_events=sum(t.hidden_events for t in timelines),
        hidden_max_dur_us=max(t.hidden_max_dur_us for t in timelines),
        folded_events=sum(t.folded_events for t in timelines),
        resolution_us=max(t.resolution_us for t in timelines),
        all_lanes=tuple(dict.fromkeys(lane for t in timelines for lane in t.all_lanes)),
        matched_lanes=sum(t.matched_lanes for t in timelines),
        flows=pd.concat(flows, ignore_index=True) if flows else pd.DataFrame(columns=FLOW_COLUMNS),
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
