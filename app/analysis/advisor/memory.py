"""Advisor rules on device memory: peak near capacity, activation share, allocator churn (analysis layer)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from app.analysis.memory.events import compute_memory_timeline
from app.presentation.units import format_percent

from .common import DOCS, events_of, require_device_trace, severity_for, trace_weight
from .model import Finding, MissingEvidence, RunEvidence, Severity
from .registry import rule
from .signals import in_spans

__all__ = ["memory_near_capacity", "allocator_churn"]

# torch-tb-profiler warns above 90% of totalGlobalMem ("at the limit of device memory capacity").
MEM_CAPACITY_SHARE_MIN = 0.90
MEM_CAPACITY_HIGH = 0.97
# When memory is not near the limit, a step whose growth (activations kept for backward) is
# ≥ 60% of the peak and the peak ≥ 50% of the device still leaves batch size on the table.
ACTIVATION_SHARE_MIN = 0.60
ACTIVATION_PEAK_MIN = 0.50
# cudaFree inside steady-state steps: the caching allocator should make it ~0 per step.
FREES_PER_STEP_MIN = 1.0

_FIX = """\
from torch.utils.checkpoint import checkpoint
def forward(self, x):                      # recompute activations in backward instead of storing
    for block in self.blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return self.head(x)
with torch.autocast("cuda", dtype=torch.bfloat16): ...   # halves activation memory
optimizer.zero_grad(set_to_none=True)      # frees .grad between steps
with torch.no_grad(): evaluate(model)      # no activations kept where no backward follows
# smaller micro-batches + gradient accumulation keep the effective batch size
# torch.cuda.empty_cache() does NOT lower the peak: it only returns cached blocks to the driver"""

_CHURN_FIX = """\
# remove torch.cuda.empty_cache() from the training loop: the allocator then re-uses its cache
# instead of calling cudaFree/cudaMalloc (each synchronises the device)
# fragmentation with varying shapes: let segments grow instead of splitting
#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py"""


def _capacity(ev: RunEvidence, device: str) -> float | None:
    idx = int(device.split(":")[1]) if ":" in device else 0
    props = ev.device_properties
    for p in props:
        if p.get("id") == idx and p.get("totalGlobalMem"):
            return float(p["totalGlobalMem"])
    if 0 <= idx < len(props) and props[idx].get("totalGlobalMem"):
        return float(props[idx]["totalGlobalMem"])
    for d in ev.devices:
        if str(d.get("type")) == "cuda" and int(d.get("index", -1)) == idx and d.get("total_memory_bytes"):
            return float(d["total_memory_bytes"])
    return None


def _activation_share(ev: RunEvidence, rank: int, device: str) -> float:
    trace = next((t for t in ev.traces if int(getattr(t, "rank", 0)) == rank), None)
    steps = ev.steps[ev.steps["rank"] == rank] if "rank" in ev.steps.columns else pd.DataFrame()
    if trace is None or steps.empty:
        return float("nan")
    tl = compute_memory_timeline(trace)
    tl = tl[(tl["device"] == device) & tl["allocated_bytes"].notna()]
    shares = []
    for s, e in zip(steps["start_us"].to_numpy(float), steps["end_us"].to_numpy(float)):
        before = tl[tl["ts_us"] <= s]["allocated_bytes"]
        inside = tl[in_spans(tl["ts_us"].to_numpy(float), np.array([s]), np.array([e]))]["allocated_bytes"]
        if inside.empty:
            continue
        base = float(before.iloc[-1]) if len(before) else float(inside.iloc[0])
        peak = float(inside.max())
        if peak > 0:
            shares.append(max(0.0, peak - base) / peak)
    return float(np.median(shares)) if shares else float("nan")


class PeakSource(StrEnum):
    """Where a device's memory peak was read: the trace's allocator events or the system samples."""

    TRACE = "trace"
    SYSTEM = "system"


@dataclass(frozen=True)
class _Peak:
    rank: int
    device: str
    allocated: float
    reserved: float
    capacity: float
    ops_at_peak: str
    source: PeakSource

    @property
    def share(self) -> float:
        return self.allocated / self.capacity


def _trace_peaks(ev: RunEvidence) -> list[_Peak]:
    peaks = getattr(ev.analysis, "memory_peaks", None)
    if not ev.has_device_trace or peaks is None or peaks.empty:
        return []
    out = []
    for r in peaks[~peaks["device"].astype(str).isin(("cpu", "unknown"))].itertuples(index=False):
        cap = _capacity(ev, str(r.device))
        if cap:
            out.append(_Peak(int(r.rank), str(r.device), float(r.peak_allocated_bytes), float(r.peak_reserved_bytes),
                             cap, str(getattr(r, "ops_at_peak", "") or ""), PeakSource.TRACE))
    return out


def _system_peaks(ev: RunEvidence) -> list[_Peak]:
    """Peaks from the agent's system samples (torch.cuda.max_memory_allocated, mem_get_info)."""
    sysdf = ev.system
    if sysdf is None or sysdf.empty or "gpu_max_allocated_bytes" not in sysdf.columns:
        return []
    df = sysdf.assign(**{c: sysdf[c] if c in sysdf.columns else 0 for c in ("rank", "gpu_index")})

    def num(g: pd.DataFrame, c: str) -> float:
        return float(pd.to_numeric(g[c], errors="coerce").max()) if c in g.columns else np.nan

    out = []
    for (rank, index), g in df.dropna(subset=["gpu_max_allocated_bytes"]).groupby(["rank", "gpu_index"]):
        peak, total, reserved = num(g, "gpu_max_allocated_bytes"), num(g, "gpu_total_bytes"), num(g, "gpu_reserved_bytes")
        cap = float(total) if total == total and total > 0 else _capacity(ev, f"cuda:{int(index)}")
        if peak == peak and cap:
            out.append(_Peak(int(rank), f"cuda:{int(index)}", float(peak), float(reserved if reserved == reserved else peak),
                             float(cap), "", PeakSource.SYSTEM))
    return out


@rule("memory_near_capacity", family="memory", title="Device memory near capacity or dominated by activations")
def memory_near_capacity(ev: RunEvidence) -> list[Finding]:
    """Fires when peak allocated ≥ MEM_CAPACITY_SHARE_MIN of the device, or activations are
    ≥ ACTIVATION_SHARE_MIN of a peak that is ≥ ACTIVATION_PEAK_MIN of the device. Peaks come from
    the trace's memory events, else from the agent's system samples."""
    peaks = _trace_peaks(ev) or _system_peaks(ev)
    if not peaks:
        raise MissingEvidence("needs GPU memory (trace memory events with profile_memory=True, or the agent's "
                              "GPU samples) and the device's total memory")
    p = max(peaks, key=lambda x: x.share)
    share = p.share
    act = _activation_share(ev, p.rank, p.device) if p.source is PeakSource.TRACE else float("nan")
    near = share >= MEM_CAPACITY_SHARE_MIN
    act_heavy = act == act and act >= ACTIVATION_SHARE_MIN and share >= ACTIVATION_PEAK_MIN
    if not (near or act_heavy):
        return []
    gib = 1024 ** 3
    evidence = {"peak_allocated_gib": p.allocated / gib, "peak_reserved_gib": p.reserved / gib,
                "capacity_gib": p.capacity / gib, "peak_share": share, "rank": p.rank}
    if act == act:
        evidence["activation_share"] = act
    title = (f"Memory peak at {format_percent(share)} of {p.capacity / gib:.0f} GiB on {p.device}" if near else
             f"Activations are {format_percent(act)} of the memory peak on {p.device}")
    return [Finding(
        rule="memory_near_capacity", family="memory",
        weight=trace_weight(ev, ev.steps[ev.steps["rank"] == p.rank]) if p.source is PeakSource.TRACE and "rank" in ev.steps.columns else None,
        severity=severity_for(share, high=MEM_CAPACITY_HIGH, medium=MEM_CAPACITY_SHARE_MIN) if near else Severity.LOW,
        title=title,
        explanation=(
            f"Peak allocated memory on rank {p.rank} {p.device} is {p.allocated / gib:.2f} GiB of "
            f"{p.capacity / gib:.2f} GiB ({format_percent(share)}), reserved {p.reserved / gib:.2f} GiB"
            + (f"; memory grows by {format_percent(act)} of the peak within a step (activations kept for backward)"
               if act == act else "") + (f". At the peak: {p.ops_at_peak[:120]}." if p.ops_at_peak else ".")
        ),
        evidence=evidence,
        fix_summary="Trade compute for memory (activation checkpointing), use autocast, smaller micro-batches; "
                    "empty_cache does not lower the peak.",
        fix=_FIX,
        expected_gain="room for a larger batch (throughput) or a bigger model; avoids out-of-memory",
        gain_share=0.15 if near else 0.05, doc_url=DOCS["checkpoint"],
        chart="Memory › timeline and peak" if p.source is PeakSource.TRACE else "System › GPU memory",
        rank=p.rank,
    )]


_FREE = re.compile(r"^(?:cuda|hip)Free$|^cuMemFree")
_MALLOC = re.compile(r"^(?:cuda|hip)Malloc$|^cuMemAlloc")


@rule("allocator_churn", family="memory", title="cudaFree/cudaMalloc inside training steps")
def allocator_churn(ev: RunEvidence) -> list[Finding]:
    """Fires when steady-state steps (all but each rank's first) call cudaFree ≥ FREES_PER_STEP_MIN times."""
    require_device_trace(ev)
    frees = mallocs = blocked = 0.0
    n_steps = 0
    for rank, events in events_of(ev):
        steps = ev.steps[ev.steps["rank"] == rank].sort_values("step").iloc[1:] if "rank" in ev.steps.columns else None
        if steps is None or steps.empty:
            continue
        names = events["name"].astype(str)
        inside = in_spans(events["ts_us"].to_numpy(float), steps["host_start_us"].to_numpy(float), steps["host_end_us"].to_numpy(float))
        f, m = inside & names.str.contains(_FREE).to_numpy(), inside & names.str.contains(_MALLOC).to_numpy()
        frees, mallocs = frees + f.sum(), mallocs + m.sum()
        blocked += float(events.loc[f | m, "dur_us"].sum())
        n_steps += len(steps)
    if not n_steps:
        raise MissingEvidence("needs at least two profiler steps per rank")
    per_step = frees / n_steps
    if per_step < FREES_PER_STEP_MIN:
        return []
    step_us = float(ev.steps["duration_us"].mean())
    share = blocked / n_steps / step_us if step_us > 0 else 0.0
    return [Finding(
        rule="allocator_churn", family="memory", severity=Severity.MEDIUM, weight=trace_weight(ev, ev.steps),
        title=f"{per_step:.1f} cudaFree calls per step: the allocator cache is being emptied",
        explanation=(
            f"After the first step the caching allocator should serve every allocation from its cache, yet "
            f"each step calls cudaFree {per_step:.1f}× and cudaMalloc {mallocs / n_steps:.1f}×, spending "
            f"{blocked / n_steps / 1000:.2f} ms. cudaFree synchronises the device. torch.cuda.empty_cache() in "
            f"the loop, or fragmentation under varying shapes, causes this."
        ),
        evidence={"cuda_free_per_step": per_step, "cuda_malloc_per_step": mallocs / n_steps,
                  "alloc_ms_per_step": blocked / n_steps / 1000, "alloc_share": share},
        fix_summary="Do not call empty_cache in the loop; use expandable segments against fragmentation.",
        fix=_CHURN_FIX,
        expected_gain=f"about {format_percent(share)} of step time, plus the syncs it forces",
        gain_share=share, doc_url=DOCS["memory"], chart="Timeline › cuda_runtime row (cudaFree/cudaMalloc)",
    )]
