"""Advisor rule: low GPU utilisation and large idle gaps between kernels (analysis layer)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app.presentation.units import format_ms_of_us, format_percent

from .common import (
    DOCS,
    events_of,
    per_step_share,
    require_device_trace,
    require_steps,
    step_share,
    training_steps,
    weigh,
    weigh_steps,
)
from .model import Finding, MissingEvidence, RunEvidence, Severity
from .registry import Guard, get_rule, rule
from .signals import KERNEL_CATS, by_cat, idle_gaps_us, in_spans

__all__ = ["low_device_utilization"]

# torch-tb-profiler flags GPU utilisation below 50% ("GPU ... has low utilization").
BUSY_SHARE_MIN = 0.5
# HIGH below a quarter busy (half the flag), when that holds across the steps (common.weigh).
BUSY_SHARE_HIGH = BUSY_SHARE_MIN / 2
# A gap of 100 µs is ~20 kernel launches of idle: visible in the timeline, worth a look.
GAP_US = 100.0
# Sampled utilisation needs a few samples (1 s apart by default) to mean anything.
SYSTEM_MIN_SAMPLES = 5
# The idle time is not all recoverable (the fix depends on the cause): count half of it.
IDLE_RECOVERABLE = 0.5
_BUSY_COLUMNS = ("kernel_us", "memcpy_us", "memset_us", "communication_us")
_IDLE_CAUSES = {"dataloader_us": "waiting for data (DataLoader)", "cpu_exec_us": "CPU work (Python/ATen ops)",
                "runtime_us": "CUDA runtime calls (launches, syncs)", "other_us": "nothing recorded (other)"}
# The rules that look at each idle cause in detail. When one of them fires on the run, this finding
# names it by the title the user sees; a rule that did not fire is not mentioned (its id means
# nothing to a reader who does not see it listed).
_RELATED = {"dataloader_us": ("data_loading_bound",), "cpu_exec_us": ("launch_bound",),
            "runtime_us": ("sync_points", "launch_bound")}
_FIXES = {
    "dataloader_us": "loader = DataLoader(ds, batch_size=bs, num_workers=8, pin_memory=True, persistent_workers=True)",
    "cpu_exec_us": "model = torch.compile(model)   # fewer, larger kernels; move CPU pre-processing off the step",
    "runtime_us": "# remove syncs (.item(), .cpu()) and launch fewer kernels: torch.compile / CUDA graphs",
    "other_us": "# look at the Timeline between kernels: Python overhead, logging, checkpoints, host work",
}


def _gaps(ev: RunEvidence) -> tuple[float, float]:
    big, largest, n_steps = 0, 0.0, 0
    for rank, events in events_of(ev):
        steps = ev.steps[ev.steps["rank"] == rank]
        dev = by_cat(events, (*KERNEL_CATS, "gpu_memcpy", "gpu_memset"))
        if dev.empty or steps.empty:
            continue
        for s, e in zip(steps["start_us"].to_numpy(float), steps["end_us"].to_numpy(float)):
            d = dev[in_spans(dev["ts_us"].to_numpy(float), np.array([s]), np.array([e]))]
            gaps = idle_gaps_us(d["ts_us"].to_numpy(float), (d["ts_us"] + d["dur_us"]).to_numpy(float))
            big += int((gaps > GAP_US).sum())
            largest = max(largest, float(gaps.max()) if len(gaps) else 0.0)
        n_steps += len(steps)
    return big / max(1, n_steps), largest


def _related_titles(ev: RunEvidence, cause: str) -> list[str]:
    """Titles of the findings that the rules related to ``cause`` report on this run."""
    titles = []
    for rule_id in _RELATED.get(cause, ()):
        try:
            titles += [f.title for f in get_rule(rule_id).func(ev)]
        except MissingEvidence:  # that rule cannot look at this run: nothing to point to
            continue
    return titles


def _ranks_text(steps: pd.DataFrame) -> str:
    n = steps["rank"].nunique() if "rank" in steps.columns else 1
    return f" of {n} ranks" if n > 1 else ""


def _gain_text(idle: float) -> str:
    return f"up to {format_percent(idle * IDLE_RECOVERABLE)} of step time (half of the {format_percent(idle)} the GPU is idle)"


def _sampled_busy(ev: RunEvidence) -> np.ndarray:
    """The agent's GPU utilisation samples (0–1) between the first and last sample with GPU work."""
    sysdf = ev.system
    if sysdf is None or sysdf.empty or "gpu_util_percent" not in sysdf.columns:
        raise MissingEvidence("needs a GPU trace (kernels) or the agent's sampled GPU utilisation")
    util = pd.to_numeric(sysdf["gpu_util_percent"], errors="coerce").dropna().to_numpy()
    active = np.flatnonzero(util > 0)
    if len(active) < SYSTEM_MIN_SAMPLES:
        raise MissingEvidence(f"needs at least {SYSTEM_MIN_SAMPLES} GPU utilisation samples while the GPU worked")
    out: np.ndarray = util[active[0]:active[-1] + 1] / 100
    return out


def _trace_steps(ev: RunEvidence) -> pd.DataFrame:
    return training_steps(ev, require_steps(ev, *_BUSY_COLUMNS))


def busy_share(ev: RunEvidence) -> float:
    """The GPU's busy share of the training step (from the trace, else the sampled utilisation's
    median): the quantity the rule guards, higher is better."""
    try:
        require_device_trace(ev)
    except MissingEvidence:
        return float(np.median(_sampled_busy(ev)))
    steps = _trace_steps(ev)
    return sum(step_share(steps, c) for c in _BUSY_COLUMNS)


def _system_utilization(ev: RunEvidence) -> list[Finding]:
    """From the agent's sampled GPU utilisation (NVML: share of time a kernel ran) when no GPU trace."""
    samples = _sampled_busy(ev)
    busy = float(np.median(samples))
    if busy >= BUSY_SHARE_MIN:
        return []
    severity, weight = weigh(Severity.HIGH if busy < BUSY_SHARE_HIGH else Severity.MEDIUM, values=samples,
                             high=BUSY_SHARE_HIGH, steps=len(samples), basis="samples", measure="busy_share",
                             worse="below")
    return [Finding(
        rule="low_device_utilization", family="utilization",
        severity=severity, weight=weight,
        title=f"GPU busy only {format_percent(busy)} of the time (sampled)",
        explanation=(
            f"The agent's samples of GPU utilisation (share of time a kernel was running) have a median of "
            f"{format_percent(busy)} while the job used the GPU, so the GPU sat idle about {format_percent(1 - busy)} of the "
            "time. Record a profiler trace to see what the GPU waits for. "
            f"Expected gain: half of the idle share ({format_percent(1 - busy)} × {IDLE_RECOVERABLE:g} = "
            f"{format_percent((1 - busy) * IDLE_RECOVERABLE)}), since not all idle time can be won back."
        ),
        evidence={"busy_share": busy, "idle_share": 1 - busy, "samples": len(samples)},
        fix_summary="Find what the GPU waits for (data loading, host work, syncs) in a trace; then raise the batch size.",
        fix="# record a few profiled steps: torchscope run --wait 5 --active 3 -- python train.py\n" + _FIXES["other_us"],
        expected_gain=_gain_text(1 - busy),
        gain_share=(1 - busy) * IDLE_RECOVERABLE, doc_url=DOCS["tuning"], chart="System › GPU utilisation",
    )]


def _trace_explanation(ev: RunEvidence, n: int, ranks: str, step_us: float, busy: float, idle: dict[str, float], cause: str,
                       gaps_per_step: float, largest_us: float) -> str:
    """What was measured over ``n`` steps of mean ``step_us``, what the idle time was spent on,
    which other finding explains the cause, and how the gain is estimated."""
    causes = sorted(((v, c) for c, v in idle.items() if v >= 0.0005), reverse=True)[:3]  # shown as ≥ 0.1%
    spent = "; ".join(f"{_IDLE_CAUSES[c]} {format_percent(v)}" for v, c in causes)
    text = (
        f"Measured over {n} profiled step{'s' if n != 1 else ''}{ranks} (mean {format_ms_of_us(step_us)}): kernels, memory "
        f"copies and collectives kept the GPU busy {format_percent(busy)} of the step, so it sat idle "
        f"{format_percent(1 - busy)} ({format_ms_of_us((1 - busy) * step_us)} per step). "
        + (f"While the GPU was idle, the step's time went to: {spent} (shares of the step). " if spent else "")
        + f"{gaps_per_step:.1f} gaps per step between device work exceed {GAP_US:g} µs; the largest is "
        f"{format_ms_of_us(largest_us)}. "
    )
    related = _related_titles(ev, cause)
    if related:
        text += "The finding " + " and ".join(f"“{t}”" for t in related) + " looks at this cause in detail. "
    return text.rstrip() + "\n\n" + (  # a paragraph of its own on the Findings tab
        f"Expected gain: the idle time is the most a fix can win back, and only part of it is recoverable "
        f"(it depends on the cause), so half is counted: {format_percent(1 - busy)} × {IDLE_RECOVERABLE:g} = "
        f"{format_percent((1 - busy) * IDLE_RECOVERABLE)} of step time."
    )


@rule("low_device_utilization", family="utilization", title="GPU idle for much of the step",
      guards=Guard("busy_share", "higher", "GPU busy share of the step", busy_share))
def low_device_utilization(ev: RunEvidence) -> list[Finding]:
    """Fires when kernels, copies and collectives keep the GPU busy < BUSY_SHARE_MIN of the step
    (without a GPU trace: when the sampled GPU utilisation's median is below it)."""
    try:
        require_device_trace(ev)
    except MissingEvidence:
        return _system_utilization(ev)
    steps = _trace_steps(ev)
    busy = sum(step_share(steps, c) for c in _BUSY_COLUMNS)
    if busy >= BUSY_SHARE_MIN:
        return []
    idle = {c: step_share(steps, c) for c in _IDLE_CAUSES if c in steps.columns}
    cause = max(idle, key=lambda c: idle[c]) if idle else "other_us"
    gaps_per_step, largest = _gaps(ev)
    step_us = float(steps["duration_us"].astype(float).mean())
    evidence = {"busy_share": busy, "idle_share": 1 - busy, "idle_ms_per_step": (1 - busy) * step_us / 1000,
                "gaps_over_100us_per_step": gaps_per_step, "largest_gap_ms": largest / 1000,
                **{f"idle_{c[:-3]}_share": v for c, v in idle.items()}}
    severity, weight = weigh_steps(ev, steps, Severity.HIGH if busy < BUSY_SHARE_HIGH else Severity.MEDIUM,
                                   values=per_step_share(steps, *_BUSY_COLUMNS), high=BUSY_SHARE_HIGH,
                                   measure="busy_share", worse="below")
    return [Finding(
        rule="low_device_utilization", family="utilization",
        severity=severity, weight=weight,
        title=f"GPU busy only {format_percent(busy)} of the step",
        explanation=_trace_explanation(ev, len(steps), _ranks_text(steps), step_us, busy, idle, cause, gaps_per_step, largest),
        evidence=evidence,
        fix_summary="Remove what the GPU waits for (the idle cause named above); then raise the batch size.",
        fix=_FIXES[cause] + "\n# then: a larger batch size gives each kernel more work",
        expected_gain=_gain_text(1 - busy),
        gain_share=(1 - busy) * IDLE_RECOVERABLE, doc_url=DOCS["tuning"],
        chart="Overview › step breakdown; Timeline › GPU rows (gaps between kernels)",
    )]
