"""Advisor rules: optimizer.step() expensive relative to forward and backward; gradients zeroed
instead of set to None (analysis layer)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from app.presentation.units import format_percent

from .common import (
    DOCS,
    events_of,
    per_step_share,
    require_steps,
    step_share,
    trace_weight,
    training_steps,
    weigh_steps,
)
from .model import Finding, MissingEvidence, RunEvidence, Severity
from .registry import Guard, rule

__all__ = ["optimizer_expensive", "zero_grad_set_to_none"]

# The optimizer's share of the step above 10%, and at least a fifth of forward+backward: a
# per-parameter loop of small ops, which foreach (one kernel per op for all parameters) or fused
# (one kernel for the whole update) implementations collapse. PyTorch reports fused Adam at
# several × the for-loop speed; we claim half the optimizer time.
OPT_SHARE_MIN = 0.10
OPT_RATIO_MIN = 0.20
OPT_RECOVERABLE = 0.5
# HIGH from a quarter of the step (and only when that holds across the steps: common.weigh).
OPT_SHARE_HIGH = 0.25
_STEP_NAME = re.compile(r"^Optimizer\.step#(\w+)\.step")

_FIX = """\
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)    # CUDA: one kernel
optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, foreach=True)  # CPU/any
optimizer.zero_grad(set_to_none=True)"""


def _optimizer_usage(ev: RunEvidence) -> tuple[str, bool, bool]:
    name, foreach, fused = "", False, False
    for _, events in events_of(ev):
        names = events["name"].astype(str)
        if not name:
            hit = names[names.str.match(_STEP_NAME)]
            if len(hit):
                name = _STEP_NAME.match(hit.iloc[0]).group(1)  # type: ignore[union-attr]
        foreach = foreach or bool(names.str.startswith("aten::_foreach_").any())
        fused = fused or bool(names.str.contains(r"^aten::_fused_", regex=True).any())
    return name, foreach, fused


def _training_steps(ev: RunEvidence) -> pd.DataFrame:
    # Evaluation steps have no optimizer step of their own worth measuring against: left out.
    return training_steps(ev, require_steps(ev, "optimizer_us", "forward_us", "backward_us"))


def optimizer_share(ev: RunEvidence) -> float:
    """The optimizer's share of the training steps (the quantity the rule guards)."""
    return step_share(_training_steps(ev), "optimizer_us")


@rule("optimizer_expensive", family="optimizer", title="Optimizer step expensive next to forward/backward",
      guards=Guard("optimizer_share", "lower", "optimizer share of the step", optimizer_share))
def optimizer_expensive(ev: RunEvidence) -> list[Finding]:
    """Fires when optimizer time ≥ OPT_SHARE_MIN of the step and ≥ OPT_RATIO_MIN of forward+backward,
    unless a fused optimizer already runs."""
    steps = _training_steps(ev)
    opt = step_share(steps, "optimizer_us")
    fwd_bwd = step_share(steps, "forward_us") + step_share(steps, "backward_us")
    ratio = opt / fwd_bwd if fwd_bwd > 0 else 0.0
    name, foreach, fused = _optimizer_usage(ev)
    if opt < OPT_SHARE_MIN or ratio < OPT_RATIO_MIN or fused:
        return []
    impl = "foreach" if foreach else "for-loop (one small op per parameter)"
    severity, weight = weigh_steps(ev, steps, Severity.HIGH if opt >= OPT_SHARE_HIGH else Severity.MEDIUM,
                                   values=per_step_share(steps, "optimizer_us"), high=OPT_SHARE_HIGH,
                                   measure="optimizer_share")
    return [Finding(
        rule="optimizer_expensive", family="optimizer",
        severity=severity, weight=weight,
        title=f"optimizer.step() takes {format_percent(opt)} of the step ({ratio:.2f}× forward+backward)",
        explanation=(
            f"The {name or 'optimizer'} step runs the {impl} implementation and costs {format_percent(opt)} of each "
            f"step against {format_percent(fwd_bwd)} for forward and backward together."
        ),
        evidence={"optimizer_share": opt, "forward_backward_share": fwd_bwd, "optimizer_ratio": ratio,
                  "uses_foreach": int(foreach), "uses_fused": int(fused)},
        fix_summary=("Use the fused implementation (fused=True)" if foreach else
                     "Use the foreach (foreach=True) or fused (fused=True) implementation") + "; zero grads with set_to_none.",
        fix=_FIX,
        expected_gain=f"about {format_percent(opt * OPT_RECOVERABLE)} of step time",
        gain_share=opt * OPT_RECOVERABLE, doc_url=DOCS["optim"],
        chart="Overview › training-loop view (Optimizer); Operators › aten::add_/mul_ calls",
    )]


# Optimizer.zero_grad's record_function range and the ops that write zeros into gradients in it
# (set_to_none=False: one aten::zero_ per parameter, or one aten::_foreach_zero_ with foreach).
_ZERO_GRAD_RANGE = re.compile(r"^Optimizer\.zero_grad#")
ZEROING_OPS = frozenset({"aten::zero_", "aten::_foreach_zero_"})
# One zeroing call per step is enough: set_to_none=True makes none.
ZEROING_CALLS_PER_STEP_MIN = 1.0

_ZERO_FIX = """\
optimizer.zero_grad(set_to_none=True)   # the default since PyTorch 2.0; also model.zero_grad()
# gradients are then allocated by backward and freed here, instead of kept and overwritten with zeros
# (code that reads p.grad before backward must allow None)"""


@rule("zero_grad_set_to_none", family="optimizer", title="Gradients zeroed instead of set to None")
def zero_grad_set_to_none(ev: RunEvidence) -> list[Finding]:
    """Fires when ``Optimizer.zero_grad`` ranges in the profiled training steps write zeros into the
    gradients (aten::zero_ / aten::_foreach_zero_ inside them) ≥ ZEROING_CALLS_PER_STEP_MIN per step."""
    steps = training_steps(ev, require_steps(ev))
    ranges = calls = 0
    zero_us = 0.0
    for rank, events in events_of(ev):
        mine = steps[steps["rank"] == rank] if "rank" in steps.columns else steps
        ts = events["ts_us"].to_numpy(float)
        inside = np.zeros(len(events), dtype=bool)
        for s, e in zip(mine["start_us"].to_numpy(float), mine["end_us"].to_numpy(float)):
            inside |= (ts >= s) & (ts <= e)
        names = events["name"].astype(str)
        zg = events[names.str.match(_ZERO_GRAD_RANGE).to_numpy() & inside]
        ranges += len(zg)
        zeroing = events[names.isin(ZEROING_OPS).to_numpy() & inside]
        for s, d in zip(zg["ts_us"].to_numpy(float), zg["dur_us"].to_numpy(float)):
            hit = zeroing[(zeroing["ts_us"] >= s) & (zeroing["ts_us"] <= s + d)]
            calls += len(hit)
            zero_us += float(hit["dur_us"].sum())
    if not ranges:
        raise MissingEvidence("needs optimizer.zero_grad() calls inside the profiled steps")
    n_steps = max(1, len(steps))
    per_step = calls / n_steps
    if per_step < ZEROING_CALLS_PER_STEP_MIN:
        return []
    total = float(steps["duration_us"].sum())
    share = zero_us / total if total > 0 else 0.0
    return [Finding(
        rule="zero_grad_set_to_none", family="optimizer", severity=Severity.LOW, weight=trace_weight(ev, steps),
        title=f"optimizer.zero_grad() writes zeros into the gradients ({per_step:.0f} calls per step)",
        explanation=(
            f"Inside optimizer.zero_grad() the trace shows {per_step:.0f} zeroing calls per step (aten::zero_ / "
            f"aten::_foreach_zero_), {zero_us / n_steps / 1000:.3f} ms per step: zero_grad(set_to_none=False) keeps "
            f"every gradient allocated between steps and overwrites it, where set_to_none=True frees it and lets "
            f"backward write the first gradient instead of adding to zeros."
        ),
        evidence={"zeroing_calls_per_step": per_step, "zeroing_ms_per_step": zero_us / n_steps / 1000,
                  "zeroing_share": share, "zero_grad_calls": ranges},
        fix_summary="Call optimizer.zero_grad(set_to_none=True) (the default since PyTorch 2.0).",
        fix=_ZERO_FIX,
        expected_gain=f"about {format_percent(share)} of step time, and the gradients' memory between steps",
        gain_share=share, doc_url="https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html",
        chart="Operators › aten::zero_ calls; Timeline › Optimizer.zero_grad",
    )]
