"""Advisor rules on memory: device peak near capacity, activation share, allocator churn; on a CPU,
activations many times the model and out-of-place activation functions (analysis layer)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from app.analysis.memory.events import compute_memory_timeline
from app.presentation.units import format_percent

from .common import (
    DOCS,
    events_of,
    require_device_trace,
    require_steps,
    severity_for,
    trace_weight,
    training_steps,
)
from .inference import is_inference_run
from .model import Finding, MissingEvidence, RunEvidence, Severity
from .registry import rule
from .signals import in_spans

__all__ = ["memory_near_capacity", "allocator_churn", "activation_memory", "inplace_activations"]

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


# --- CPU (host) memory: activations kept for backward, out-of-place activation functions --------

# What a step allocates on top of what it started with (activations kept for backward, plus the
# gradients when they were set to None) against the parameters' bytes. Weights, gradients and
# Adam's two moments are 4× the parameters: activations beyond that set the step's peak, and
# checkpointing (which keeps one input per block) cuts them several-fold; below it the peak is
# mostly the model's own state and checkpointing saves less than it costs in recompute.
ACTIVATION_PARAM_RATIO_MIN = 4.0
FLOAT32_BYTES = 4  # the module tree counts parameters, not bytes: float32 assumed
# Out-of-place activation functions that have an in-place form (nn.ReLU(inplace=True), ...),
# and the least share of the step's allocated bytes worth an in-place rewrite.
INPLACE_OPS = frozenset({
    "aten::relu", "aten::relu6", "aten::hardtanh", "aten::leaky_relu", "aten::elu", "aten::selu", "aten::celu",
    "aten::silu", "aten::hardswish", "aten::hardsigmoid", "aten::mish", "aten::threshold", "aten::rrelu",
})
INPLACE_BYTES_SHARE_MIN = 0.05
# ...and at least 1 MiB a step: below that the caching allocator serves it for next to nothing
# (a 3-layer MLP's one ReLU allocates 8 KiB).
INPLACE_MIB_PER_STEP_MIN = 1.0

_ACT_FIX = """\
from torch.utils.checkpoint import checkpoint
def forward(self, x):                      # keep each block's input, recompute the rest in backward
    for block in self.blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return self.head(x)
# or smaller micro-batches with gradient accumulation (same effective batch size)"""

_INPLACE_FIX = """\
nn.ReLU(inplace=True)          # also nn.SiLU, nn.LeakyReLU, nn.Hardswish, nn.ELU, ... (inplace=True)
x = torch.relu_(x)             # functional: F.relu(x, inplace=True)
# not on a tensor autograd still needs (e.g. a residual input): torch raises an error there"""


def _host_only(ev: RunEvidence) -> pd.DataFrame:
    if ev.has_device_trace:
        raise MissingEvidence("needs a CPU-only run (device memory is memory_near_capacity's)")
    steps = training_steps(ev, require_steps(ev))
    if not any(t.memory is not None and not t.memory.empty for t in ev.traces):
        raise MissingEvidence("needs memory events in a trace (profile_memory=True)")
    return steps


def _rank_steps(steps: pd.DataFrame, rank: int) -> pd.DataFrame:
    return steps[steps["rank"] == rank] if "rank" in steps.columns else steps


def host_step_growth(ev: RunEvidence, steps: pd.DataFrame) -> list[float]:
    """Per step: peak host (cpu) memory allocated inside it minus what was allocated at its start."""
    growth = []
    for trace in ev.traces:
        tl = compute_memory_timeline(trace)
        tl = tl[(tl["device"] == "cpu") & tl["allocated_bytes"].notna()]
        if tl.empty:
            continue
        ts, alloc = tl["ts_us"].to_numpy(float), tl["allocated_bytes"].to_numpy(float)
        mine = _rank_steps(steps, int(getattr(trace, "rank", 0)))
        for s, e in zip(mine["start_us"].to_numpy(float), mine["end_us"].to_numpy(float)):
            inside = (ts >= s) & (ts <= e)
            if not inside.any():
                continue
            before = alloc[ts < s]
            base = float(before[-1]) if len(before) else float(alloc[inside][0])
            growth.append(max(0.0, float(alloc[inside].max()) - base))
    return growth


def _param_count(ev: RunEvidence) -> int:
    root = (ev.module_tree or {}).get("root") if isinstance(ev.module_tree, dict) else None
    params = int((root or {}).get("params") or 0)
    if params <= 0:
        raise MissingEvidence("needs the model's parameter count (graph/modules.json, written by the agent)")
    return params


@rule("activation_memory", family="memory", title="Activations many times the model (CPU)")
def activation_memory(ev: RunEvidence) -> list[Finding]:
    """Fires for CPU training when the memory a step allocates on top of its start (median over the
    steps) is ≥ ACTIVATION_PARAM_RATIO_MIN × the parameters' bytes. Not for an inference run: with
    no backward, what a call allocates is its outputs and workspace, not activations kept for it."""
    if is_inference_run(ev):
        raise MissingEvidence("applies to training: an inference run keeps no activations for a backward")
    steps = _host_only(ev)
    param_bytes = float(_param_count(ev) * FLOAT32_BYTES)
    growth = host_step_growth(ev, steps)
    if not growth:
        raise MissingEvidence("needs host memory events inside the profiled steps")
    act = float(np.median(growth))
    ratio = act / param_bytes
    if ratio < ACTIVATION_PARAM_RATIO_MIN:
        return []
    mib = 1024 ** 2
    return [Finding(
        rule="activation_memory", family="memory", severity=Severity.LOW, weight=trace_weight(ev, steps),
        title=f"Each step allocates {act / mib:.1f} MiB for backward, {ratio:.1f}× the model's parameters",
        explanation=(
            f"In the median profiled step, host memory grows by {act / mib:.1f} MiB over what the step started with "
            f"(activations kept for backward, plus gradients), against {param_bytes / mib:.1f} MiB of parameters "
            f"(float32). Activations, not the model, set the memory peak: activation checkpointing keeps one input "
            f"per block and recomputes the rest in backward (more time, much less memory)."
        ),
        evidence={"step_growth_mib": act / mib, "param_mib": param_bytes / mib, "growth_param_ratio": ratio,
                  "threshold_ratio": ACTIVATION_PARAM_RATIO_MIN},
        fix_summary="Checkpoint blocks (torch.utils.checkpoint) or use smaller micro-batches with accumulation.",
        fix=_ACT_FIX,
        expected_gain="a lower memory peak (room for a larger batch or model), at the cost of one more forward per block",
        gain_share=0.05, doc_url=DOCS["checkpoint"], chart="Memory › timeline and peak",
    )]


def _outermost_spans(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    starts, ends = ops["ts_us"].to_numpy(float), (ops["ts_us"] + ops["dur_us"]).to_numpy(float)
    order = np.argsort(starts, kind="stable")
    keep_s, keep_e, end = [], [], -np.inf
    for s, e in zip(starts[order], ends[order]):
        if s >= end:
            keep_s.append(s)
            keep_e.append(e)
            end = e
    return np.array(keep_s), np.array(keep_e)


@rule("inplace_activations", family="memory", title="Out-of-place activation functions allocate memory (CPU)")
def inplace_activations(ev: RunEvidence) -> list[Finding]:
    """Fires for CPU training when out-of-place activation functions that have an in-place form
    allocate ≥ INPLACE_BYTES_SHARE_MIN of the bytes the profiled steps allocate, and at least
    INPLACE_MIB_PER_STEP_MIN per step."""
    steps = _host_only(ev)
    calls, act_bytes, all_bytes = 0, 0.0, 0.0
    names_seen: set[str] = set()
    for trace in ev.traces:
        mem, events = trace.memory, trace.events
        if mem is None or mem.empty:
            continue
        mine = _rank_steps(steps, int(getattr(trace, "rank", 0)))
        s, e = mine["start_us"].to_numpy(float), mine["end_us"].to_numpy(float)
        mts = mem["ts_us"].to_numpy(float)
        cpu = mem["device_type"].astype("Float64").to_numpy(dtype=float, na_value=np.nan) == 0
        pos = mem["bytes"].to_numpy(float) > 0
        in_steps = in_spans(mts, s, e) & cpu & pos
        all_bytes += float(mem["bytes"].to_numpy(float)[in_steps].sum())
        names = events["name"].astype(str)
        ops = events[names.isin(INPLACE_OPS).to_numpy() & in_spans(events["ts_us"].to_numpy(float), s, e)]
        if ops.empty:
            continue
        names_seen |= set(ops["name"].astype(str))
        os_, oe = _outermost_spans(ops)
        calls += len(os_)
        act_bytes += float(mem["bytes"].to_numpy(float)[in_steps & in_spans(mts, os_, oe)].sum())
    n_steps = max(1, len(steps))
    share = act_bytes / all_bytes if all_bytes > 0 else 0.0
    mib = 1024 ** 2
    if calls == 0 or share < INPLACE_BYTES_SHARE_MIN or act_bytes / n_steps < INPLACE_MIB_PER_STEP_MIN * mib:
        return []
    ops_text = ", ".join(sorted(names_seen))
    return [Finding(
        rule="inplace_activations", family="memory", severity=Severity.LOW, weight=trace_weight(ev, steps),
        title=f"Out-of-place activations allocate {format_percent(share)} of each step's memory",
        explanation=(
            f"{calls / n_steps:.0f} calls per step of {ops_text} allocate a new tensor each, "
            f"{act_bytes / n_steps / mib:.2f} MiB per step ({format_percent(share)} of the bytes the step allocates). "
            f"In place, each writes over its input (usually a convolution, norm or linear output nothing else needs)."
        ),
        evidence={"calls_per_step": calls / n_steps, "activation_mib_per_step": act_bytes / n_steps / mib,
                  "allocated_mib_per_step": all_bytes / n_steps / mib, "activation_bytes_share": share,
                  "threshold_share": INPLACE_BYTES_SHARE_MIN},
        fix_summary="Use the in-place form (nn.ReLU(inplace=True), F.relu(x, inplace=True)) where the input is not needed.",
        fix=_INPLACE_FIX,
        expected_gain=f"{format_percent(share)} fewer bytes allocated per step (allocator work and memory traffic)",
        gain_share=0.02, doc_url="https://pytorch.org/docs/stable/generated/torch.nn.ReLU.html",
        chart="Memory › timeline; Operators › aten::relu calls",
    )]
