"""Advisor rules on host↔device traffic inside the step: copies and synchronisation points (analysis layer)."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeAlias

import numpy as np
import pandas as pd

from app.presentation.units import format_ms_of_us, format_percent

from .common import DOCS, events_of, require_device_trace, severity_for, weigh_steps
from .model import Finding, MissingEvidence, RunEvidence, Severity, Weight
from .registry import Guard, rule
from .signals import by_cat, in_spans

# One rank's measures: counts and times per step as floats, ``per_step`` the per-step shares.
_Measures: TypeAlias = dict[str, float | np.ndarray]

__all__ = ["sync_points", "host_device_copies", "blocked_share", "copy_share"]

# A sync every step is normal (logging loss.item()); several per step with the host blocked
# ≥ 3% of the step is a pattern worth removing (each sync also drains the GPU's queue).
SYNCS_PER_STEP_MIN = 2.0
SYNC_BLOCKED_SHARE_MIN = 0.03
SYNC_SEVERITY_HIGH = 0.15
SYNC_SEVERITY_MEDIUM = 0.07
# Host↔device copies above 5% of the step (the same bar torch-tb-profiler sets for DataLoader).
COPY_SHARE_MIN = 0.05
COPY_SEVERITY_HIGH = 0.20
COPY_SEVERITY_MEDIUM = 0.10

_SYNC_CALL = re.compile(r"^(?:cuda|hip)(?:Stream|Device|Event)Synchronize$|^(?:cuda|hip)Memcpy$|^cuMemcpyDtoH|^cuStreamSynchronize")
_SCALAR = ("aten::_local_scalar_dense",)
_HTOD = re.compile(r"HtoD|Host -> Device", re.IGNORECASE)
_DTOH = re.compile(r"DtoH|Device -> Host|Device -> Pageable|Device -> Pinned", re.IGNORECASE)
_PAGEABLE_HTOD = re.compile(r"Pageable -> Device", re.IGNORECASE)

_SYNC_FIX = """\
# keep values on the GPU inside the loop; read them once in a while
running = torch.zeros((), device=device)
for i, (x, y) in enumerate(loader):
    loss = step(x, y)
    running += loss.detach()             # no .item(): no sync
    if i % 100 == 0:
        print(running.item() / 100)      # one sync per 100 steps
        running.zero_()
# avoid .cpu(), .numpy(), print(tensor), `if tensor:` and torch.cuda.synchronize() in the step"""

_COPY_FIX = """\
loader = DataLoader(dataset, batch_size=bs, num_workers=4, pin_memory=True)
model = model.to(device)                 # once, before the loop
for x, y in loader:
    x = x.to(device, non_blocking=True)  # async copy from pinned memory
    y = y.to(device, non_blocking=True)
# create tensors on the device directly: torch.zeros(..., device=device)"""


def _spans(ev: RunEvidence, rank: int, host: bool) -> tuple[np.ndarray, np.ndarray]:
    steps = ev.steps
    if steps.empty or "rank" not in steps.columns:
        raise MissingEvidence("needs profiler steps (ProfilerStep#N) to count per step")
    s = steps[steps["rank"] == rank]
    a, b = ("host_start_us", "host_end_us") if host and "host_start_us" in s.columns else ("start_us", "end_us")
    return s[a].to_numpy(float), s[b].to_numpy(float)


def _per_span_sum(ts: np.ndarray, values: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Sum of ``values`` per span (spans sorted by start, as the step table is); times outside every
    span count nowhere."""
    out = np.zeros(len(start))
    if not len(ts) or not len(start):
        return out
    i = np.searchsorted(start, ts, side="right") - 1
    ok = (i >= 0) & (ts <= end[np.maximum(i, 0)])
    np.add.at(out, i[ok], values[ok])
    return out


def _per_step_share(part_us: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    dur = end - start
    return np.where(dur > 0, part_us / np.where(dur > 0, dur, 1.0), 0.0)


def _weigh_rank(ev: RunEvidence, worst: pd.Series, severity: Severity, high: float, measure: str) -> tuple[Severity, Weight]:
    """The severity gate on the worst rank's steps and their per-step shares."""
    rank_steps = ev.steps[ev.steps["rank"] == int(worst["rank"])]
    return weigh_steps(ev, rank_steps, severity, values=worst["per_step"], high=high, measure=measure)


def _per_rank(ev: RunEvidence, measure: Callable[[RunEvidence, int, pd.DataFrame], _Measures]) -> pd.DataFrame:
    rows = []
    for rank, events in events_of(ev):
        if not (events["cat"].astype(str) == "kernel").any():
            continue
        rows.append({"rank": rank, **measure(ev, rank, events)})
    if not rows:
        raise MissingEvidence("needs a GPU trace")
    return pd.DataFrame(rows)


def _sync_measure(ev: RunEvidence, rank: int, events: pd.DataFrame) -> _Measures:
    start, end = _spans(ev, rank, host=True)
    ts = events["ts_us"].to_numpy(float)
    inside = in_spans(ts, start, end)
    names = events["name"].astype(str)
    runtime = events["cat"].astype(str).isin(("cuda_runtime", "cuda_driver")).to_numpy()
    calls = inside & runtime & names.str.contains(_SYNC_CALL).to_numpy()
    scalars = inside & names.isin(_SCALAR).to_numpy()
    # Kineto's cuda_sync events mark the same waits on the GPU timeline (newer torch versions).
    marks = in_spans(ts, *_spans(ev, rank, host=False)) & (events["cat"].astype(str) == "cuda_sync").to_numpy()
    n = max(1, len(start))
    blocked = _per_span_sum(ts[calls], events["dur_us"].to_numpy(float)[calls], start, end)
    return {"steps": len(start), "syncs": float(calls.sum()) / n, "items": float(scalars.sum()) / n,
            "per_step": _per_step_share(blocked, start, end),
            "sync_marks": float(marks.sum()) / n,
            "blocked_us": float(events.loc[calls, "dur_us"].sum()) / n,
            "step_us": float((end - start).mean()) if len(start) else 0.0}


def _worst_sync_rank(ev: RunEvidence) -> tuple[pd.Series, float]:
    require_device_trace(ev)
    per = _per_rank(ev, _sync_measure)
    worst = per.loc[(per["blocked_us"] / per["step_us"].where(per["step_us"] > 0)).fillna(0).idxmax()]
    return worst, (float(worst["blocked_us"] / worst["step_us"]) if worst["step_us"] > 0 else 0.0)


def blocked_share(ev: RunEvidence) -> float:
    """Share of the step the host waits in sync calls, worst rank (the quantity sync_points guards)."""
    return _worst_sync_rank(ev)[1]


@rule("sync_points", family="transfers", title="Host waits for the GPU inside the step",
      guards=Guard("blocked_share", "lower", "host blocked in syncs, share of the step", blocked_share))
def sync_points(ev: RunEvidence) -> list[Finding]:
    """Fires with ≥ SYNCS_PER_STEP_MIN sync calls per step blocking ≥ SYNC_BLOCKED_SHARE_MIN of it."""
    worst, share = _worst_sync_rank(ev)
    if worst["syncs"] < SYNCS_PER_STEP_MIN or share < SYNC_BLOCKED_SHARE_MIN:
        return []
    severity, weight = _weigh_rank(ev, worst, severity_for(share, high=SYNC_SEVERITY_HIGH, medium=SYNC_SEVERITY_MEDIUM),
                                   SYNC_SEVERITY_HIGH, "blocked_share")
    return [Finding(
        rule="sync_points", family="transfers",
        severity=severity, weight=weight,
        title=f"{worst['syncs']:.0f} host–GPU syncs per step block the host {format_percent(share)} of the step",
        explanation=(
            f"On rank {int(worst['rank'])} each step makes {worst['syncs']:.1f} synchronising calls "
            f"(cudaStreamSynchronize/cudaDeviceSynchronize/blocking copies), {worst['items']:.1f} of them from "
            f".item()/scalar reads, and the host waits {format_ms_of_us(worst['blocked_us'])} per step. While it waits it "
            f"cannot queue the next kernels, so the GPU idles right after each sync."
        ),
        evidence={"syncs_per_step": float(worst["syncs"]), "item_calls_per_step": float(worst["items"]),
                  "cuda_sync_events_per_step": float(worst["sync_marks"]),
                  "blocked_ms_per_step": worst["blocked_us"] / 1000, "blocked_share": share,
                  "step_ms": worst["step_us"] / 1000, "rank": int(worst["rank"])},
        fix_summary="Remove .item()/.cpu()/print(tensor)/explicit synchronize from the step; accumulate on the device.",
        fix=_SYNC_FIX,
        expected_gain=f"up to {format_percent(share)} of step time, plus the GPU idle after each sync",
        gain_share=share, doc_url=DOCS["tuning"], chart="Timeline › cuda_runtime row (Synchronize calls)",
        rank=int(worst["rank"]),
    )]


def _copy_measure(ev: RunEvidence, rank: int, events: pd.DataFrame) -> _Measures:
    start, end = _spans(ev, rank, host=False)
    copies = by_cat(events, ("gpu_memcpy",))
    names = copies["name"].astype(str)
    h2d_d2h = copies[names.str.contains(_HTOD) | names.str.contains(_DTOH)]
    inside = in_spans(h2d_d2h["ts_us"].to_numpy(float), start, end)
    sel = h2d_d2h[inside]
    n = max(1, len(start))
    sel_names = sel["name"].astype(str)
    per_step = _per_span_sum(sel["ts_us"].to_numpy(float), sel["dur_us"].to_numpy(float), start, end)
    return {"steps": len(start), "copy_us": float(sel["dur_us"].sum()) / n,
            "per_step": _per_step_share(per_step, start, end),
            "htod": float(sel_names.str.contains(_HTOD).sum()) / n,
            "dtoh": float(sel_names.str.contains(_DTOH).sum()) / n,
            "pageable_htod": float(sel_names.str.contains(_PAGEABLE_HTOD).sum()) / n,
            "copy_mb": float(pd.to_numeric(sel["bytes"], errors="coerce").fillna(0).sum()) / n / 1e6,
            "step_us": float((end - start).mean()) if len(start) else 0.0}


def _worst_copy_rank(ev: RunEvidence) -> pd.Series:
    require_device_trace(ev)
    per = _per_rank(ev, _copy_measure)
    per["share"] = (per["copy_us"] / per["step_us"].where(per["step_us"] > 0)).fillna(0)
    return per.loc[per["share"].idxmax()]


def copy_share(ev: RunEvidence) -> float:
    """Share of the step in HtoD/DtoH copies, worst rank (the quantity host_device_copies guards)."""
    return float(_worst_copy_rank(ev)["share"])


@rule("host_device_copies", family="transfers", title="Host↔device copies inside the step",
      guards=Guard("copy_share", "lower", "host↔device copies, share of the step", copy_share))
def host_device_copies(ev: RunEvidence) -> list[Finding]:
    """Fires when HtoD/DtoH copies take ≥ COPY_SHARE_MIN of the step."""
    worst = _worst_copy_rank(ev)
    share = float(worst["share"])
    if share < COPY_SHARE_MIN:
        return []
    severity, weight = _weigh_rank(ev, worst, severity_for(share, high=COPY_SEVERITY_HIGH, medium=COPY_SEVERITY_MEDIUM),
                                   COPY_SEVERITY_HIGH, "copy_share")
    pageable = f"; {worst['pageable_htod']:.0f} per step come from pageable (unpinned) memory" if worst["pageable_htod"] else ""
    return [Finding(
        rule="host_device_copies", family="transfers",
        severity=severity, weight=weight,
        title=f"Host↔device copies take {format_percent(share)} of the step",
        explanation=(
            f"On rank {int(worst['rank'])} each step copies {worst['htod']:.0f}× host→device and "
            f"{worst['dtoh']:.0f}× device→host ({worst['copy_mb']:.1f} MB, {format_ms_of_us(worst['copy_us'])}){pageable}."
        ),
        evidence={"copy_share": share, "copy_ms_per_step": worst["copy_us"] / 1000,
                  "htod_per_step": float(worst["htod"]), "dtoh_per_step": float(worst["dtoh"]),
                  "pageable_htod_per_step": float(worst["pageable_htod"]), "copy_mb_per_step": float(worst["copy_mb"]),
                  "rank": int(worst["rank"])},
        fix_summary="Move the model and constants to the device once; pin host memory and copy batches with non_blocking=True.",
        fix=_COPY_FIX,
        expected_gain=f"up to {format_percent(share)} of step time when copies overlap compute",
        gain_share=share, doc_url=DOCS["pinned"], chart="Overview › step breakdown (Memcpy); Timeline › memcpy rows",
        rank=int(worst["rank"]),
    )]
