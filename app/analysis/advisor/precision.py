"""Advisor rules: fp32 matmul/convolution time on GPUs with tensor cores, or on CPUs with native
bfloat16 arithmetic → mixed precision (analysis layer)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from app.presentation.units import format_percent

from .common import (
    DOCS,
    events_of,
    require_device_trace,
    require_steps,
    severity_for,
    training_steps,
    weigh_steps,
)
from .model import Finding, MissingEvidence, RunEvidence, Severity
from .registry import rule
from .signals import float_kind, in_spans, kernel_ops

__all__ = ["mixed_precision", "cpu_mixed_precision", "TENSOR_CORE_MAJOR", "FP32_MMA_SHARE_MIN", "CPU_FP32_MMA_SHARE_MIN"]

# Tensor cores exist from compute capability 7.0 (Volta) on; torch-tb-profiler uses the same
# test (`computeMajor >= 7`) for its AMP recommendation.
TENSOR_CORE_MAJOR = 7
# fp32 matmul/conv kernels above 10% of GPU kernel time are worth converting; below it the gain
# is within run-to-run noise.
FP32_MMA_SHARE_MIN = 0.10
# Half-precision kernels over half of the matmul/conv time mean autocast is already on.
HALF_SHARE_ALREADY = 0.5
# Tensor-core fp16/bf16 matmuls typically run ≥2× faster than fp32 ones (NVIDIA's mixed precision
# guide quotes 2–8×); we claim only the conservative end: half of the fp32 matmul/conv time.
MMA_SPEEDUP_SAVING = 0.5
MMA_SEVERITY_HIGH = 0.40
MMA_SEVERITY_MEDIUM = 0.20

# Host ops whose kernels tensor cores accelerate (matmuls, convolutions, attention).
MMA_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
    "aten::addmv", "aten::mv", "aten::_addmm_activation", "aten::einsum",
    "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
    "aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward",
    "aten::miopen_convolution", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_flash_attention", "aten::_efficient_attention_forward",
    "aten::_scaled_dot_product_cudnn_attention",
})
# Kernel names of GEMM/convolution libraries, for kernels launched by compiled graphs or
# custom ops whose host op is not in MMA_OPS.
_MMA_KERNEL = re.compile(r"gemm|convolve|conv2d|conv3d|implicit_?gemm|cutlass|xmma|fprop|dgrad|wgrad", re.IGNORECASE)

_FIX = """\
scaler = torch.amp.GradScaler("cuda")           # not needed with bfloat16
for x, y in loader:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):  # or torch.bfloat16 on Ampere+ (no scaler)
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()"""


def _tensor_core_major(ev: RunEvidence) -> int:
    majors = [int(p["computeMajor"]) for p in ev.device_properties if p.get("computeMajor") is not None]
    if not majors:
        for d in ev.devices:
            cap = str(d.get("capability") or "")
            if str(d.get("type")) == "cuda" and cap[:1].isdigit():
                majors.append(int(cap.split(".")[0]))
    if not majors:
        raise MissingEvidence("needs the GPU's compute capability (trace deviceProperties or manifest devices)")
    return max(majors)


def _classify(ev: RunEvidence) -> pd.DataFrame:
    frames = []
    for _, events in events_of(ev):
        k = kernel_ops(events)
        if k.empty:
            continue
        mma = k["op"].isin(MMA_OPS) | k["name"].str.contains(_MMA_KERNEL)
        kinds = {pair: float_kind(*pair) for pair in set(zip(k["op_types"], k["name"]))}  # names repeat a lot
        k = k.assign(mma=mma, kind=[kinds[pair] for pair in zip(k["op_types"], k["name"])])
        frames.append(k)
    if not frames:
        raise MissingEvidence("needs GPU kernels in a trace")
    return pd.concat(frames, ignore_index=True)


@rule("mixed_precision", family="precision", title="fp32 matmuls/convolutions on a tensor-core GPU")
def mixed_precision(ev: RunEvidence) -> list[Finding]:
    """Fires when fp32 matmul/conv kernels take ≥ FP32_MMA_SHARE_MIN of kernel time on a GPU
    with compute capability ≥ TENSOR_CORE_MAJOR and autocast is not already in use."""
    require_device_trace(ev)
    major = _tensor_core_major(ev)
    if major < TENSOR_CORE_MAJOR or any("AMD" in str(p.get("name", "")) for p in ev.device_properties):
        # ROCm reports gfx versions as computeMajor; its matrix cores follow other rules.
        raise MissingEvidence(f"needs an NVIDIA GPU with tensor cores (compute capability ≥ {TENSOR_CORE_MAJOR})")
    k = _classify(ev)
    total = float(k["dur_us"].sum())
    mma = k[k["mma"]]
    mma_us = float(mma["dur_us"].sum())
    fp32_us = float(mma.loc[mma["kind"] == "float32", "dur_us"].sum())
    half_us = float(mma.loc[mma["kind"] == "half", "dur_us"].sum())
    unknown_us = mma_us - fp32_us - half_us
    if mma_us > 0 and unknown_us / mma_us > 0.5:
        raise MissingEvidence("the trace does not say the dtypes of its matmuls (record_shapes=False)")
    share = fp32_us / total if total > 0 else 0.0
    if share < FP32_MMA_SHARE_MIN or (mma_us > 0 and half_us / mma_us >= HALF_SHARE_ALREADY):
        return []
    gain = share * MMA_SPEEDUP_SAVING
    top = mma[mma["kind"] == "float32"].groupby("op")["dur_us"].sum().sort_values(ascending=False)
    top_ops = ", ".join(str(o) or "?" for o in top.index[:3])
    # The dtype of a kernel does not change from step to step; the gate judges only how many steps.
    severity, weight = weigh_steps(ev, ev.steps, severity_for(share, high=MMA_SEVERITY_HIGH, medium=MMA_SEVERITY_MEDIUM),
                                   values=None, high=MMA_SEVERITY_HIGH, measure="fp32_mma_share")
    return [Finding(
        rule="mixed_precision", family="precision",
        severity=severity, weight=weight,
        title=f"fp32 matmuls/convolutions take {format_percent(share)} of GPU time on a tensor-core GPU",
        explanation=(
            f"The GPU (compute capability {major}.x) has tensor cores, but {format_percent(share)} of kernel "
            f"time goes to float32 matmul/convolution kernels (mostly {top_ops}); only "
            f"{format_percent(half_us / mma_us if mma_us else 0)} of matmul time is fp16/bf16."
        ),
        evidence={"fp32_mma_share": share, "fp32_mma_ms": fp32_us / 1000, "half_mma_ms": half_us / 1000,
                  "kernel_ms": total / 1000, "compute_major": major, "threshold_share": FP32_MMA_SHARE_MIN},
        fix_summary="Run forward and loss under torch.autocast (fp16 with GradScaler, or bf16).",
        fix=_FIX,
        expected_gain=f"about {format_percent(gain)} of GPU time (matmuls ≥2× faster), and less activation memory",
        gain_share=gain, doc_url=DOCS["amp"], chart="Kernels › time by kernel; Operators › input types",
    )]


# --- CPU: bfloat16 autocast, only where the CPU computes bf16 natively ---------------------------

# fp32 matmuls/convolutions above a fifth of the CPU step: below it, even a 2× faster matmul saves
# less than a tenth of the step, within run-to-run noise on a shared CPU.
CPU_FP32_MMA_SHARE_MIN = 0.20
CPU_MMA_SEVERITY_MEDIUM = 0.50
# AMX/AVX512-BF16 bf16 matmuls run ~2× (AVX512-BF16) to several × (AMX) the fp32 ones (Intel's
# oneDNN figures); we claim the conservative end, as on GPUs: half of the fp32 matmul time.
CPU_BF16_SAVING = 0.5

_CPU_FIX = """\
# only on a CPU with native bfloat16 (AMX or AVX512-BF16: run.json devices "bf16_native": true)
for x, y in loader:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):   # no GradScaler with bf16
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()"""


def _cpu_bf16_native(ev: RunEvidence) -> tuple[bool, list[str]]:
    for d in ev.devices:
        if str(d.get("type")) == "cpu" and "bf16_native" in d:
            return bool(d["bf16_native"]), [str(f) for f in d.get("bf16_flags") or ()]
    raise MissingEvidence("needs the CPU's bfloat16 support (run.json devices: bf16_native, recorded by the agent)")


def _outermost(events: pd.DataFrame) -> pd.DataFrame:
    """The events not nested in another of ``events`` on the same thread (linear → addmm counted once)."""
    keep = np.zeros(len(events), dtype=bool)
    ordered = events.assign(_i=np.arange(len(events))).sort_values(["tid", "ts_us"], kind="stable")
    end, tid = -np.inf, None
    for i, t, ts, dur in zip(ordered["_i"], ordered["tid"].astype(str), ordered["ts_us"], ordered["dur_us"]):
        if t != tid:
            end, tid = -np.inf, t
        if ts >= end:
            keep[i] = True
            end = ts + dur
    return events[keep]


def cpu_mma_time(ev: RunEvidence, steps: pd.DataFrame) -> tuple[float, float, float]:
    """(fp32 µs, bf16/fp16 µs, unknown-dtype µs) of the outermost matmul/convolution ops inside ``steps``."""
    fp32 = half = unknown = 0.0
    for rank, events in events_of(ev):
        mine = steps[steps["rank"] == rank] if "rank" in steps.columns else steps
        names = events["name"].astype(str)
        inside = in_spans(events["ts_us"].to_numpy(float), mine["start_us"].to_numpy(float), mine["end_us"].to_numpy(float))
        mma = _outermost(events[names.isin(MMA_OPS).to_numpy() & inside])
        for types, dur in zip(mma["input_types"].astype(str), mma["dur_us"].to_numpy(float)):
            kind = float_kind(types, "")
            if kind == "float32":
                fp32 += dur
            elif kind == "half":
                half += dur
            else:
                unknown += dur
    return fp32, half, unknown


@rule("cpu_mixed_precision", family="precision", title="fp32 matmuls on a CPU with native bfloat16")
def cpu_mixed_precision(ev: RunEvidence) -> list[Finding]:
    """Fires for CPU training when fp32 matmul/conv ops take ≥ CPU_FP32_MMA_SHARE_MIN of the step,
    bf16 does not already do half of them, and the CPU has native bf16 (AMX/AVX512-BF16 flags,
    recorded by the agent); silent on CPUs without it, where bf16 autocast was measured slower."""
    if ev.has_device_trace:
        raise MissingEvidence("needs a CPU-only run (GPU runs are mixed_precision's)")
    native, flags = _cpu_bf16_native(ev)
    steps = training_steps(ev, require_steps(ev))
    fp32, half, unknown = cpu_mma_time(ev, steps)
    mma = fp32 + half + unknown
    if mma > 0 and unknown / mma > 0.5:
        raise MissingEvidence("the trace does not say the dtypes of its matmuls (record_shapes=False)")
    total = float(steps["duration_us"].sum())
    share = fp32 / total if total > 0 else 0.0
    if not native or share < CPU_FP32_MMA_SHARE_MIN or (mma > 0 and half / mma >= HALF_SHARE_ALREADY):
        return []
    gain = share * CPU_BF16_SAVING
    severity, weight = weigh_steps(ev, steps, Severity.MEDIUM if share >= CPU_MMA_SEVERITY_MEDIUM else Severity.LOW,
                                   values=None, high=1.0, measure="fp32_mma_share")
    return [Finding(
        rule="cpu_mixed_precision", family="precision", severity=severity, weight=weight,
        title=f"fp32 matmuls/convolutions take {format_percent(share)} of the step on a CPU with native bfloat16",
        explanation=(
            f"The CPU has native bfloat16 arithmetic ({', '.join(flags) or 'bf16'}), but {format_percent(share)} of "
            f"the training step goes to float32 matmul/convolution ops and only "
            f"{format_percent(half / mma if mma else 0)} of matmul time is bf16/fp16."
        ),
        evidence={"fp32_mma_share": share, "fp32_mma_ms": fp32 / 1000, "half_mma_ms": half / 1000,
                  "step_ms_total": total / 1000, "threshold_share": CPU_FP32_MMA_SHARE_MIN},
        fix_summary="Run forward and loss under torch.autocast('cpu', dtype=torch.bfloat16).",
        fix=_CPU_FIX,
        expected_gain=f"about {format_percent(gain)} of step time (bf16 matmuls ≥2× faster here), and less activation memory",
        gain_share=gain, doc_url=DOCS["amp"], chart="Operators › aten::mm/addmm and their input types",
    )]
