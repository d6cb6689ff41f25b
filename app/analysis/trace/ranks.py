"""Cross-rank analysis: per-rank step summaries, straggler scores and the slowest rank's cause (analysis layer, pure).

Two steps, so that a worker can summarise its own rank and only the summary travels:

- ``summarize_rank(trace)`` reduces one rank's events to a small ``RankStepSummary``: per step its
  boundaries and breakdown (compute, communication, overlap, data loading, host), and each
  collective instance it took part in (name, step, entry and exit in the rank's own clock);
- ``rank_summary(per_rank)`` compares the summaries of all ranks: per rank step time, breakdown,
  clock offset and a **straggler score** in 0–1, and names the cause (data loading, compute, host)
  of a rank that is late. docs/trace-engine.md ("Ranks and stragglers") defines every number.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.stats.dist import t_upper_tail
from app.analysis.trace.categories import (
    ANNOTATION_CATS,
    COMM_OP_NAMES,
    DEVICE_CATEGORIES,
    OP_CATS,
    cat_in,
    communication_kernel_mask,
    name_mask,
)
from app.analysis.trace.distributed import compute_overlap
from app.analysis.trace.intervals import event_spans
from app.analysis.trace.step_spans import find_steps
from app.analysis.trace.step_views import device_view
from app.data.trace import TraceSet, TraceTables

__all__ = ["CollectiveArrival", "StepTimes", "RankStepSummary", "COLLECTIVE_COLUMNS", "compute_collective_table",
           "summaries_from_tables", "summarize_rank", "rank_summary", "find_straggler", "leading_rank",
           "looks_late", "diff_stragglers",
           "STRAGGLER_MIN", "STRAGGLER_MIN_LATE", "STRAGGLER_MAX_P", "CAUSES", "RANK_SUMMARY_KEYS"]


@dataclass(frozen=True)
class CollectiveArrival:
    """One collective call on one rank, in that rank's own clock (µs).

    ``(step, name, index)`` identifies the same collective instance on every rank: ``index`` counts
    the calls of ``name`` within ``step`` (``step`` is None outside every step; ``index`` then counts
    over the trace). ``start_us`` is when the rank entered it (its arrival), ``end_us`` when it left.
    """

    name: str
    step: int | None
    index: int
    start_us: float
    end_us: float


@dataclass(frozen=True)
class StepTimes:
    """One step of one rank (µs, the rank's clock). ``compute_us`` is device work (kernels, copies)
    or, in a trace without device work, host ops; ``host_us`` is the rest of host overhead (runtime
    calls, plus host ops when the device does the compute); ``communication_us`` is collective time
    (kernels or host ops) not already counted as compute; ``overlap_us`` is compute and collective
    kernels running at the same time."""

    step: int
    start_us: float
    end_us: float
    compute_us: float
    communication_us: float
    overlap_us: float
    dataloader_us: float
    host_us: float
    other_us: float

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class RankStepSummary:
    """What cross-rank analysis needs of one rank: its steps and its collective calls.

    Small (a few numbers per step and per collective) and picklable, so that parallel ingest sends
    this instead of events. ``device`` says whether ``compute_us`` is device time.
    """

    rank: int
    steps: tuple[StepTimes, ...]
    collectives: tuple[CollectiveArrival, ...]
    device: bool = False


# --- one rank: events → summary -------------------------------------------------------------------

COLLECTIVE_COLUMNS = ["rank", "name", "step", "index", "start_us", "end_us"]


def _point_to_point(name: str) -> bool:
    """An NCCL/RCCL send/receive kernel (``ncclKernel_SendRecv_…``, ``ncclDevKernel_SendRecv``,
    ``ncclKernel_Send…``): it pairs two ranks, and the pair's exits are not simultaneous (a pipeline
    stage's send ends when its peer has taken the data), so it is no sync point of the group."""
    head = name[:40].lower()
    return head.startswith(("nccl", "rccl")) and any(t in head for t in ("sendrecv", "_send", "_recv"))


def _collective_mask(ev: pd.DataFrame) -> np.ndarray:
    """Collective kernels when the trace has any (a rank waits for its peers inside the kernel),
    else collective host ops (``gloo:all_reduce``…: a CPU job waits inside them). Point-to-point
    kernels are left out (``_point_to_point``), and with them a device trace may have none."""
    kern = communication_kernel_mask(ev)
    if kern.any():  # a device trace: its host collective ops only launch the kernels
        names = ev["name"][kern]  # the names of these few events only (the column is categorical)
        kern = kern.copy()
        kern[kern] = [not _point_to_point(str(n)) for n in names]
        return kern
    host = cat_in(ev, OP_CATS | ANNOTATION_CATS | {"python"})
    return np.asarray(host & name_mask(ev, COMM_OP_NAMES.__contains__), dtype=bool)


def compute_collective_table(traces: TraceSet, steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank, its collective calls (COLLECTIVE_COLUMNS, µs in the rank's clock), by start.

    ``step`` is the step (of ``steps``, compute_steps' table) whose span holds the call's start,
    <NA> outside every step; ``index`` counts the calls of ``name`` within that step."""
    frames = []
    for t in traces:
        ev = t.events
        mask = _collective_mask(ev)
        if not mask.any():
            continue
        s, e = event_spans(ev, mask)
        df = pd.DataFrame({"rank": int(t.rank), "name": ev.loc[mask, "name"].astype(str).to_numpy(),
                           "start_us": s, "end_us": e}).sort_values("start_us", kind="stable", ignore_index=True)
        st = steps[steps["rank"] == t.rank].sort_values("start_us")
        lo, hi, numbers = st["start_us"].to_numpy(float), st["end_us"].to_numpy(float), st["step"].to_numpy(np.int64)
        at = df["start_us"].to_numpy(float)
        i = np.searchsorted(lo, at, side="right") - 1
        j = np.clip(i, 0, None)
        inside = (i >= 0) & (at < hi[j]) if len(lo) else np.zeros(len(at), bool)
        step = np.where(inside, numbers[j], 0) if len(lo) else np.zeros(len(at), np.int64)
        df["step"] = pd.arrays.IntegerArray(step.astype(np.int64), ~inside)
        df["index"] = df.groupby([df["step"].fillna(-1), "name"], sort=False).cumcount().astype(int)
        frames.append(df)
    if not frames:
        return pd.DataFrame({"rank": pd.Series(dtype=int), "name": pd.Series(dtype=str),
                             "step": pd.Series(dtype="Int64"), "index": pd.Series(dtype=int),
                             "start_us": pd.Series(dtype=float), "end_us": pd.Series(dtype=float)})
    return pd.concat(frames, ignore_index=True)[COLLECTIVE_COLUMNS]


def summaries_from_tables(steps: pd.DataFrame, overlap: pd.DataFrame,
                          collectives: pd.DataFrame) -> dict[int, RankStepSummary]:
    """One RankStepSummary per rank of the step table (compute_steps), the overlap table
    (distributed.compute_overlap) and the collective table (compute_collective_table)."""
    out: dict[int, RankStepSummary] = {}
    over = ({(int(r), int(s)): float(o) for r, s, o in zip(overlap["rank"], overlap["step"], overlap["overlap_us"])}
            if len(overlap) else {})
    by_rank = dict(tuple(collectives.groupby("rank", sort=False))) if len(collectives) else {}
    for rank, g in steps.groupby("rank", sort=True):
        device = bool((g["kernel_us"] + g["memcpy_us"] + g["memset_us"]).sum() > 0)
        rows = []
        for r in g.sort_values("start_us").itertuples(index=False):
            dev = r.kernel_us + r.memcpy_us + r.memset_us
            rows.append(StepTimes(
                step=int(r.step), start_us=float(r.start_us), end_us=float(r.end_us),
                compute_us=float(dev if device else r.cpu_exec_us), communication_us=float(r.communication_us),
                overlap_us=over.get((int(rank), int(r.step)), 0.0), dataloader_us=float(r.dataloader_us),
                host_us=float(r.runtime_us + (r.cpu_exec_us if device else 0.0)), other_us=float(r.other_us)))
        c = by_rank.get(rank)
        colls = () if c is None else tuple(
            CollectiveArrival(name=str(n), step=None if pd.isna(s) else int(s), index=int(i), start_us=float(a),
                              end_us=float(b))
            for n, s, i, a, b in zip(c["name"], c["step"], c["index"], c["start_us"], c["end_us"]))
        out[int(rank)] = RankStepSummary(rank=int(rank), steps=tuple(rows), collectives=colls, device=device)
    return out


def summarize_rank(trace: TraceTables) -> RankStepSummary | None:
    """The RankStepSummary of one rank's trace (what a parallel-ingest worker sends back), or
    None when the trace has no step. The same as summaries_from_tables over analyze's tables,
    without the training-loop view, which the summary does not use."""
    spans = find_steps(trace.events)
    if len(spans.steps) == 0:
        return None
    dv = device_view(trace.events, spans)
    steps = pd.DataFrame({"rank": int(trace.rank), "step": spans.steps.astype(int), "start_us": spans.start,
                          "end_us": spans.end, "duration_us": spans.end - spans.start}
                         | {f"{c}_us": dv[c] for c in DEVICE_CATEGORIES})
    got = summaries_from_tables(steps, compute_overlap([trace], steps), compute_collective_table([trace], steps))
    return got[int(trace.rank)]


# --- all ranks: summaries → per-rank rows ---------------------------------------------------------

STRAGGLER_MIN_LATE = 0.02  # the straggler is late by this share of its step time on average ...
STRAGGLER_MAX_P = 0.05  # ... and consistently so: chance alone makes some rank look this late at most this often
# The rank with the highest score, from this score on and late enough but not consistently so, is
# said to be "not shown" rather than absent (looks_late): more steps could tell.
STRAGGLER_MIN = 0.5
# From this many ranks on, a rank's consistency is judged by its positions among the ranks (_evidence).
RANK_TEST_MIN_RANKS = 8
# The rank test's share of the level given to the summed positions (the rest: the steps last in).
POSITION_WEIGHT = 0.8
CAUSES = ("dataloader", "compute", "host")
RANK_SUMMARY_KEYS = ["rank", "steps", "step_time_s", "compute_s", "communication_s", "overlap_s", "overlap_share",
                     "dataloader_s", "host_s", "other_s", "straggler_score", "last_share", "late_s", "sync_points",
                     "basis", "straggler_p", "evidence_steps", "clock_offset_s", "cause", "cause_excess_s"]


def _per_step_means(s: RankStepSummary) -> dict[str, float]:
    n = len(s.steps)
    def mean(attr: str) -> float:
        return sum(getattr(t, attr) for t in s.steps) / n / 1e6 if n else float("nan")
    return {"compute": mean("compute_us"), "communication": mean("communication_us"), "overlap": mean("overlap_us"),
            "dataloader": mean("dataloader_us"), "host": mean("host_us"), "other": mean("other_us")}


def _collective_sync(per_rank: Mapping[int, RankStepSummary]) -> tuple[pd.DataFrame, dict[int, float]]:
    """One row per (rank, collective instance present on ≥ 2 ranks): ``arrival_us`` = entry minus
    the rank's clock offset, ``end_us``, and the instance ``key``; and the offsets (``_clock_offsets``)."""
    rows = [(r, -1 if c.step is None else c.step, c.name, c.index, c.start_us, c.end_us)
            for r, s in per_rank.items() for c in s.collectives]
    df = pd.DataFrame(rows, columns=["rank", "step", "name", "index", "start_us", "end_us"])
    if df.empty:
        return df.assign(key=pd.Series(dtype=int), arrival_us=pd.Series(dtype=float)), {}
    df["key"] = df.groupby(["step", "name", "index"], sort=False).ngroup()
    df = df[df.groupby("key")["rank"].transform("nunique") >= 2]
    offsets = _clock_offsets(df)
    return df.assign(arrival_us=df["start_us"] - df["rank"].map(offsets).fillna(0.0)), offsets


def _step_sync(per_rank: Mapping[int, RankStepSummary]) -> pd.DataFrame:
    """Without collectives, the step boundaries: a rank that is busy longer (step − communication)
    reaches the boundary later, so ``arrival_us`` is its busy time (clock-free)."""
    rows = [(r, t.step, t.duration_us - t.communication_us) for r, s in per_rank.items() for t in s.steps]
    df = pd.DataFrame(rows, columns=["rank", "key", "arrival_us"])
    return df[df.groupby("key")["rank"].transform("nunique") >= 2] if len(df) else df


def _lateness(sync: pd.DataFrame, floor_us: float) -> pd.DataFrame:
    """Per rank: straggler score, how often last, mean lateness, instances and the evidence's
    p-value (see the module docstring and ``_evidence``)."""
    g = sync.groupby("key")["arrival_us"]
    med, high = g.transform("median"), g.transform("max")
    signed = sync["arrival_us"] - med
    late = signed.clip(lower=0.0)
    denom = np.maximum(high - med, floor_us)
    last = (sync["arrival_us"] == high) & (high - med >= floor_us)
    t = pd.DataFrame({"rank": sync["rank"], "late": late, "denom": denom, "last": last.astype(float)})
    per = t.groupby("rank").agg(late=("late", "sum"), denom=("denom", "sum"), last=("last", "mean"),
                                n=("late", "size"), mean_late=("late", "mean"))
    per["score"] = (per["late"] / per["denom"]).clip(0.0, 1.0)
    p, units = _evidence(sync.assign(signed=signed))
    per["p"] = p.reindex(per.index)
    per["units"] = units.reindex(per.index).fillna(0).astype(int)
    return per


def _evidence(sync: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per rank, (the p-value that chance alone makes some rank look as consistently late as this
    one, the steps it rests on).

    The unit is the step: a rank held up in a step is late to every collective after that point of
    the step, so the collectives of one step are not independent evidence. Per step, the rank's
    lateness is its mean signed lateness (its arrival − the median arrival) over the step's sync points, minus
    the median of the other ranks' lateness in that step; a one-sided Student's t-test over the
    steps asks whether that difference is above 0, with the rank's own spread (a rank that is late
    once by a lot, e.g. descheduled, is not a straggler), and the p-value is multiplied by the number
    of ranks tested (Bonferroni: the straggler is picked among them). With one step there is no
    spread to judge by: p is 1.

    Among RANK_TEST_MIN_RANKS ranks or more the test is a rank test instead (``_position_p``): per
    step, the rank's position among the ranks by lateness; its positions summed, and the steps in
    which it was last, each against their exact distribution under exchangeable ranks. Its level
    holds whatever the noise's shape, and it needs no spread estimated from the rank's own few
    steps: with 5 steps the t-test's spread rests on 4 degrees of freedom, and Bonferroni over 256
    ranks then asked t > 11, so that a rank slowed by 10 % of a step was named in 29 of 100
    simulated 256-rank sets (benchmarks/README.md, "The straggler among 256 ranks"). Below that,
    the t-test's Bonferroni is mild, and the positions are coarse: the smallest p the rank test can
    give is ranks^(1 − steps) / 0.8, 0.078 for 4 ranks profiled for 3 steps."""
    unit = sync["step"] if "step" in sync.columns else sync["key"]
    per_unit = sync.assign(unit=unit).pivot_table(index="unit", columns="rank", values="signed", aggfunc="mean")
    ranks = list(per_unit.columns)
    values = per_unit.to_numpy(float)
    if len(ranks) >= RANK_TEST_MIN_RANKS:
        present = np.isfinite(values)
        units = {r: int(present[:, i].sum()) for i, r in enumerate(ranks)}
        return pd.Series(_position_p(values, ranks), dtype=float), pd.Series(units, dtype=int)
    xs = {}
    for i, r in enumerate(ranks):
        others = np.delete(values, i, axis=1)
        with np.errstate(all="ignore"):
            ref = np.nanmedian(others, axis=1) if others.shape[1] else np.full(len(values), np.nan)
        x = values[:, i] - ref
        xs[r] = x[np.isfinite(x)]
    p_values = {r: min(1.0, len(ranks) * _one_sided_p(x)) for r, x in xs.items()}
    units = {r: len(x) for r, x in xs.items()}
    return pd.Series(p_values, dtype=float), pd.Series(units, dtype=int)


def _position_p(values: np.ndarray, ranks: Sequence[int]) -> dict[int, float]:
    """Per rank, the Bonferroni-corrected p-value that it is among the late ranks more consistently
    than chance. Per step (a row of ``values``, one column per rank; NaN or ±inf where a rank is
    absent) the rank has a position among the ranks present, 0 (earliest) to m − 1 (latest). The
    null is that the ranks are alike and the steps independent: then each position is uniform,
    independently from step to step, whatever the noise's shape, and two tests are exact:

    - the positions summed over the rank's steps (``_position_tail``): a rank late in every step;
      a step counts at most m − 1, so one late step (a hiccup) cannot make a straggler;
    - the steps in which it was the very last (``_last_tail``): a rank late by a lot in some steps
      only (every other step), which the sum dilutes. Two hiccups can be enough among very many
      ranks (last in 2 of 5 steps among 1,024: p = 0.049); the lateness floor of find_straggler
      (STRAGGLER_MIN_LATE) still applies.

    Weighted Bonferroni over the two (POSITION_WEIGHT to the sum) and over the ranks: p = the
    smaller of p_sum / w and p_last / (1 − w), times the ranks. Ties (equal lateness) take the
    lower position, and a rank tied for last is not last: with ties the tests are conservative.
    Not "alike": one rank consistently early moves every other rank's positions up; so did it
    their t-tests, and the lateness floor is what keeps the others unnamed then."""
    present = np.isfinite(values)
    positions = pd.DataFrame(np.where(present, values, np.nan)).rank(axis=1, method="min").to_numpy(float) - 1.0
    sizes = present.sum(axis=1)
    out = {}
    for i, r in enumerate(ranks):
        rows = present[:, i]
        if rows.sum() < 2:  # one step: p >= ranks / (0.8 m) >= 1.25 anyway
            out[r] = 1.0
            continue
        m = sizes[rows]
        pos = positions[rows, i]
        key = tuple(sorted(int(k) for k in m))  # both distributions ignore the steps' order
        p_sum = float(_position_tail(key)[int(pos.sum())])
        p_last = float(_last_tail(key)[int(np.sum(pos == m - 1))])
        out[r] = min(1.0, len(ranks) * min(p_sum / POSITION_WEIGHT, p_last / (1.0 - POSITION_WEIGHT)))
    return out


@lru_cache(maxsize=64)
def _last_tail(sizes: tuple[int, ...]) -> np.ndarray:
    """P(last in at least k of the steps) for k = 0 … n, the rank being last in step i with
    probability 1/mᵢ independently (``sizes`` = the mᵢ): a Poisson-binomial distribution."""
    return _tail_of_sum([1.0 - 1.0 / m, 1.0 / m] for m in sizes)


@lru_cache(maxsize=64)
def _position_tail(sizes: tuple[int, ...]) -> np.ndarray:
    """P(X₁ + … + Xₙ ≥ k) for k = 0 … Σ(mᵢ − 1), with Xᵢ independent and uniform on 0 … mᵢ − 1
    (``sizes`` = the mᵢ). 256 ranks and 5 steps take 0.3 ms, 1,024 ranks and 20 steps 22 ms."""
    return _tail_of_sum(np.full(m, 1.0 / m) for m in sizes)


def _tail_of_sum(pmfs: Iterable[Sequence[float] | np.ndarray]) -> np.ndarray:
    """P(sum ≥ k), k = 0, 1, …, of independent variables on 0, 1, … with the probabilities
    ``pmfs``: their convolution, summed from the top. Sums of positive terms only, so the smallest
    tails keep their digits (1,024 ranks last in 8 steps: 8.3e-25). Read-only: the callers cache it."""
    pmf = np.ones(1)
    for p in pmfs:
        pmf = np.convolve(pmf, p)
    tail = np.minimum(np.cumsum(pmf[::-1])[::-1], 1.0)
    tail.flags.writeable = False
    return tail


def _one_sided_p(x: np.ndarray) -> float:
    """p-value of a one-sided one-sample t-test of mean(x) > 0 (1 with fewer than two values)."""
    n = len(x)
    if n < 2:
        return 1.0
    mean, sd = float(np.mean(x)), float(np.std(x, ddof=1))
    if sd <= 1e-9 * max(abs(mean), 1.0):
        return 0.0 if mean > 0 else 1.0
    return t_upper_tail(mean / (sd / np.sqrt(n)), n - 1)


def _clock_offsets(sync: pd.DataFrame) -> dict[int, float]:
    """Per rank, the median of (its exit − the instance's median exit) over collective instances:
    exits are simultaneous on every rank, so this is its clock's offset (µs)."""
    if sync.empty:
        return {}
    dev = sync["end_us"] - sync.groupby("key")["end_us"].transform("median")
    return {int(r): float(v) for r, v in dev.groupby(sync["rank"]).median().items()}


def _causes(means: dict[int, dict[str, float]], floor_s: float) -> dict[int, tuple[str | None, float | None]]:
    """Per rank, the CAUSES category where it spends most more than the median of the other ranks
    (per step), when that excess is at least ``floor_s``."""
    ranks = sorted(means)
    out: dict[int, tuple[str | None, float | None]] = dict.fromkeys(ranks, (None, None))
    if len(ranks) < 2:
        return out
    # host work: runtime calls, host ops the device waits for, and Python between ops (no op covers it)
    cause_time = {r: {"dataloader": m["dataloader"], "compute": m["compute"], "host": m["host"] + m["other"]}
                  for r, m in means.items()}
    table = np.array([[cause_time[r][c] for c in CAUSES] for r in ranks], float)
    for i, r in enumerate(ranks):
        others = np.nanmedian(np.delete(table, i, axis=0), axis=0)
        excess = table[i] - others
        if np.all(np.isnan(excess)):
            continue
        j = int(np.nanargmax(excess))
        if excess[j] >= floor_s:
            out[r] = (CAUSES[j], float(excess[j]))
    return out


def rank_summary(per_rank: Mapping[int, RankStepSummary], *, min_spread_frac: float = 0.01) -> list[dict[str, Any]]:
    """Per rank (by rank): step time, per-step breakdown, straggler score and cause (RANK_SUMMARY_KEYS).

    Times are seconds per step (``step_time_s`` the median step); ``straggler_score`` is None when
    no collective instance or step is shared with another rank. ``min_spread_frac`` × the median
    step is the noise floor: an instance whose arrivals spread less counts as nobody's fault.
    docs/trace-engine.md ("Ranks and stragglers") defines each number.
    """
    per_rank = {int(r): s for r, s in per_rank.items() if s.steps}
    durations = [t.duration_us for s in per_rank.values() for t in s.steps]
    floor_us = max(min_spread_frac * float(np.median(durations)), 1.0) if durations else 1.0
    (sync, offsets), basis = _collective_sync(per_rank), "collective"
    if sync.empty:  # the step boundaries compare no clocks: no offsets
        (sync, offsets), basis = (_step_sync(per_rank), {}), "step"
    late = _lateness(sync, floor_us) if len(sync) else pd.DataFrame()
    means = {r: _per_step_means(s) for r, s in per_rank.items()}
    causes = _causes(means, floor_us * 2 / 1e6)
    rows = []
    for r in sorted(per_rank):
        s, m = per_rank[r], means[r]
        has = r in late.index
        cause, excess = causes[r]
        rows.append({
            "rank": r, "steps": len(s.steps),
            "step_time_s": float(np.median([t.duration_us for t in s.steps])) / 1e6,
            "compute_s": m["compute"], "communication_s": m["communication"],
            # compute/communication overlap needs device kernels; a CPU-only trace has none to measure
            "overlap_s": m["overlap"] if s.device else None,
            "overlap_share": m["overlap"] / m["communication"] if s.device and m["communication"] > 0 else None,
            "dataloader_s": m["dataloader"], "host_s": m["host"], "other_s": m["other"],
            "straggler_score": float(late.at[r, "score"]) if has else None,
            "last_share": float(late.at[r, "last"]) if has else None,
            "late_s": float(late.at[r, "mean_late"]) / 1e6 if has else None,
            "sync_points": int(late.at[r, "n"]) if has else 0,
            "basis": basis if has else None,
            "straggler_p": float(late.at[r, "p"]) if has else None,
            "evidence_steps": int(late.at[r, "units"]) if has else 0,
            "clock_offset_s": offsets[r] / 1e6 if r in offsets else None,
            "cause": cause, "cause_excess_s": excess,
        })
    return rows


def find_straggler(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The straggler among the rows of rank_summary: of the ranks late on average by at least
    STRAGGLER_MIN_LATE of their step time whose ``straggler_p`` is at most STRAGGLER_MAX_P (so that
    noise between balanced ranks names nobody), the one with the highest score (then the smallest p,
    the lowest rank); None when there is none (``leading_rank`` says who came closest).

    Its score need not be the highest: among many ranks, those with one hiccup each (a descheduled
    process) are the last to arrive at the instances they hold up, and the rooms those instances
    give (their spread) swamp a consistent straggler's score (at 64 simulated ranks with heavy-
    tailed noise, a rank slowed by 10 % of a step had the highest score in none of 100 sets, and is
    found in 68 by this rule; benchmarks/README.md, "The straggler among many ranks")."""
    named = [r for r in rows if r.get("straggler_score") is not None and _late_enough(r)
             and r.get("straggler_p") is not None and r["straggler_p"] <= STRAGGLER_MAX_P]
    return min(named, key=lambda r: (-r["straggler_score"], r["straggler_p"], r["rank"])) if named else None


def _late_enough(row: Mapping[str, Any]) -> bool:
    return (row.get("late_s") or 0.0) >= STRAGGLER_MIN_LATE * (row.get("step_time_s") or 0.0)


def looks_late(row: Mapping[str, Any]) -> bool:
    """Whether a rank's score is at least STRAGGLER_MIN and it is on average late by at least
    STRAGGLER_MIN_LATE of its step time (the verdict before its consistency test, and what makes
    the "no straggler shown … profile more steps" sentence)."""
    score = row.get("straggler_score")
    return score is not None and score >= STRAGGLER_MIN and _late_enough(row)


def leading_rank(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The row with the highest straggler score (lowest rank on ties); None with fewer than two scored ranks."""
    scored = [r for r in rows if r.get("straggler_score") is not None]
    if len(scored) < 2:
        return None
    return max(scored, key=lambda r: (r["straggler_score"], -r["rank"]))


def diff_stragglers(baseline: Sequence[Mapping[str, Any]], candidate: Sequence[Mapping[str, Any]],
                    *, top: int = 10) -> dict[str, Any]:
    """How the stragglers changed between two rank_summary lists.

    Returns ``baseline`` / ``candidate`` ({rank, straggler_score, cause} of find_straggler, or None),
    ``change`` (``none``, ``resolved``, ``new``, ``same_rank``, ``moved``) and ``ranks``: the ranks
    of both sides with their scores and the change, largest change first (at most ``top``)."""
    a, b = find_straggler(baseline), find_straggler(candidate)
    if a is None and b is None:
        change = "none"
    elif b is None:
        change = "resolved"
    elif a is None:
        change = "new"
    else:
        change = "same_rank" if a["rank"] == b["rank"] else "moved"
    sa = {r["rank"]: float(r["straggler_score"]) for r in baseline if r.get("straggler_score") is not None}
    sb = {r["rank"]: float(r["straggler_score"]) for r in candidate if r.get("straggler_score") is not None}
    both = [(r, sa[r], sb[r]) for r in sorted(sa.keys() & sb.keys())]
    ranks = sorted(({"rank": r, "baseline_score": x, "candidate_score": y, "delta": y - x} for r, x, y in both),
                   key=lambda d: (-abs(d["delta"]), d["rank"]))[:top]

    def brief(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
        return None if row is None else {"rank": row["rank"], "straggler_score": row["straggler_score"],
                                         "cause": row["cause"]}
    return {"baseline": brief(a), "candidate": brief(b), "change": change, "ranks": ranks}
