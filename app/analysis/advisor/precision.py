"""Advisor rule: fp32 matmul/convolution time on GPUs with tensor cores → mixed precision (analysis layer)."""
from __future__ import annotations

import re

import pandas as pd

from app.presentation.units import format_percent

from .common import DOCS, events_of, require_device_trace, severity_for, weigh_steps
from .model import Finding, MissingEvidence, RunEvidence
from .registry import rule
from .signals import float_kind, kernel_ops

__all__ = ["mixed_precision", "TENSOR_CORE_MAJOR", "FP32_MMA_SHARE_MIN"]

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
