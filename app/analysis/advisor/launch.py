"""Advisor rule: launch-bound steps — many short kernels while the GPU waits on the host (analysis layer)."""
from __future__ import annotations

import numpy as np

from app.presentation.units import format_percent

from .common import (
    DOCS,
    events_of,
    per_step_share,
    require_device_trace,
    require_steps,
    step_share,
    training_steps,
    weigh_steps,
)
from .model import Finding, RunEvidence, Severity
from .registry import Guard, rule
from .signals import by_cat, in_spans

__all__ = ["launch_bound"]

# GPU idle while the host runs the CUDA runtime or CPU ops (tb-profiler's "Runtime" + "CPU Exec")
# above a quarter of the step: the host, not the GPU, sets the pace.
LAUNCH_HOST_SHARE_MIN = 0.25
# HIGH from half the step (when that holds across the steps: common.weigh).
LAUNCH_HOST_SHARE_HIGH = 0.5
# Kernels under 10 µs are dominated by their ~5 µs launch cost (CUDA launch latency); when most
# kernels are that short, the host cannot keep the GPU fed.
SHORT_KERNEL_US = 10.0
SHORT_KERNEL_SHARE_MIN = 0.5
# Fusion (torch.compile) or CUDA graphs remove most but not all of that host time.
LAUNCH_RECOVERABLE = 0.7

_FIX = """\
model = torch.compile(model)               # fuses small ops into fewer, larger kernels
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)   # or foreach=True
# bigger batches amortise each launch; for static shapes, CUDA graphs replay a whole step:
model = torch.compile(model, mode="reduce-overhead")"""


def _kernel_stats(ev: RunEvidence) -> tuple[float, float, float]:
    durations, n_steps = [], 0
    for rank, events in events_of(ev):
        steps = ev.steps[ev.steps["rank"] == rank]
        kernels = by_cat(events, ("kernel",))
        if kernels.empty or steps.empty:
            continue
        inside = in_spans(kernels["ts_us"].to_numpy(float), steps["start_us"].to_numpy(float), steps["end_us"].to_numpy(float))
        durations.append(kernels["dur_us"].to_numpy(float)[inside])
        n_steps += len(steps)
    d = np.concatenate(durations) if durations else np.zeros(0)
    if not len(d):
        return 0.0, 0.0, 0.0
    return float(len(d) / max(1, n_steps)), float(np.median(d)), float((d < SHORT_KERNEL_US).mean())


def host_idle_share(ev: RunEvidence) -> float:
    """Share of the training step the GPU idles while the host runs the runtime or CPU ops (guarded)."""
    require_device_trace(ev)
    steps = training_steps(ev, require_steps(ev, "runtime_us", "cpu_exec_us", "kernel_us"))
    return step_share(steps, "runtime_us") + step_share(steps, "cpu_exec_us")


@rule("launch_bound", family="launch", title="Many short kernels; the GPU waits for the host",
      guards=Guard("host_idle_share", "lower", "GPU idle on the host, share of the step", host_idle_share))
def launch_bound(ev: RunEvidence) -> list[Finding]:
    """Fires when runtime+CPU-exec time with the GPU idle ≥ LAUNCH_HOST_SHARE_MIN of the step
    and ≥ SHORT_KERNEL_SHARE_MIN of kernels are shorter than SHORT_KERNEL_US."""
    require_device_trace(ev)
    steps = training_steps(ev, require_steps(ev, "runtime_us", "cpu_exec_us", "kernel_us"))
    host_share = step_share(steps, "runtime_us") + step_share(steps, "cpu_exec_us")
    per_step, median_us, short_share = _kernel_stats(ev)
    if host_share < LAUNCH_HOST_SHARE_MIN or short_share < SHORT_KERNEL_SHARE_MIN:
        return []
    gain = host_share * LAUNCH_RECOVERABLE
    severity, weight = weigh_steps(ev, steps, Severity.HIGH if host_share >= LAUNCH_HOST_SHARE_HIGH else Severity.MEDIUM,
                                   values=per_step_share(steps, "runtime_us", "cpu_exec_us"),
                                   high=LAUNCH_HOST_SHARE_HIGH, measure="host_idle_share")
    return [Finding(
        rule="launch_bound", family="launch",
        severity=severity, weight=weight,
        title=f"Launch-bound: the GPU waits on the host {format_percent(host_share)} of the step",
        explanation=(
            f"Each step launches {per_step:.0f} kernels with a median of {median_us:.1f} µs; "
            f"{format_percent(short_share)} are shorter than {SHORT_KERNEL_US:g} µs, about the cost of launching "
            f"them. For {format_percent(host_share)} of the step the GPU is idle while the host runs the CUDA "
            f"runtime or Python/ATen code."
        ),
        evidence={"host_idle_share": host_share, "kernels_per_step": per_step, "median_kernel_us": median_us,
                  "short_kernel_share": short_share, "kernel_share": step_share(steps, "kernel_us")},
        fix_summary="Fuse work into fewer kernels: torch.compile, fused/foreach optimizers, larger batches, CUDA graphs.",
        fix=_FIX,
        expected_gain=f"up to {format_percent(gain)} of step time",
        gain_share=gain, doc_url=DOCS["compile"], chart="Overview › step breakdown (Runtime, CPU Exec); Kernels › durations",
    )]
