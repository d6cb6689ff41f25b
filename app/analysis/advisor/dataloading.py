"""Advisor rules about the input pipeline: DataLoader time inside the training step (analysis layer)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.presentation.units import format_ms_of_us, format_percent

from .common import (
    DOCS,
    as_number,
    config_value,
    evaluation_step_numbers,
    per_step_share,
    require_steps,
    severity_for,
    step_share,
    training_steps,
    weigh,
    weigh_steps,
)
from .model import Finding, MissingEvidence, RunEvidence, Severity, Weight
from .registry import Guard, rule

__all__ = ["data_loading_bound", "dataloader_share", "DATALOADER_SHARE_MIN"]

# torch-tb-profiler recommends more DataLoader workers above 5% of the step
# (tb_plugin/torch_tb_profiler/profiler/run_generator: `dataloader_ratio > 0.05`).
DATALOADER_SHARE_MIN = 0.05
# Above these shares the input pipeline, not the model, sets the pace (our severity bands).
DATALOADER_SHARE_HIGH = 0.30
DATALOADER_SHARE_MEDIUM = 0.15

_FIX = """\
loader = torch.utils.data.DataLoader(
    dataset, batch_size=batch_size, shuffle=True,
    num_workers=min(8, os.cpu_count() or 1),  # decode/augment in worker processes
    pin_memory=torch.cuda.is_available(),      # page-locked buffers for fast, async copies
    persistent_workers=True,                   # keep workers alive between epochs
    prefetch_factor=4,                         # batches each worker prepares ahead
)
for x, y in loader:
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"""


@dataclass(frozen=True)
class _Measured:
    share: float
    step_us: float
    source: str
    chart: str
    steps: pd.DataFrame | None  # the trace's training steps; None when measured from metrics
    per_step: np.ndarray
    step_times_us: np.ndarray


def _from_metrics(ev: RunEvidence) -> _Measured:
    m = ev.metrics
    if not ev.has_run or m is None or "data_time_s" not in m.columns or "step_time_s" not in m.columns:
        raise MissingEvidence("needs DataLoader time: a trace with ProfilerStep#N or a data_time_s curve")
    data = pd.to_numeric(m["data_time_s"], errors="coerce")
    step = pd.to_numeric(m["step_time_s"], errors="coerce")
    ok = data.notna() & step.notna() & (step > 0)
    if not ok.any():
        raise MissingEvidence("data_time_s and step_time_s were never logged together")
    train = ok & ~pd.to_numeric(m["step"], errors="coerce").isin(evaluation_step_numbers(ev))
    ok = train if train.any() else ok  # evaluation steps left out while training steps remain
    d, t = data[ok].to_numpy(float), step[ok].to_numpy(float)
    return _Measured(float(d.sum() / t.sum()), float(t.mean() * 1e6), "metrics",
                     "Metrics › data_time_s vs step_time_s", None, d / t, t * 1e6)


def _measure(ev: RunEvidence) -> _Measured:
    try:
        # Profiled steps that also ran an evaluation pass are not training steps: left out
        # when others remain, as in the Compare breakdown (app.analysis.trace.step_window).
        steps = training_steps(ev, require_steps(ev, "dataloader_us"))
    except MissingEvidence:
        return _from_metrics(ev)
    dur = steps["duration_us"].astype(float).to_numpy()
    return _Measured(step_share(steps, "dataloader_us"), float(dur.mean()), "trace",
                     "Overview › step time breakdown (DataLoader)", steps, per_step_share(steps, "dataloader_us"), dur)


def dataloader_share(ev: RunEvidence) -> float:
    """The DataLoader's share of the training step (the quantity the rule guards)."""
    return _measure(ev).share


def _weigh(ev: RunEvidence, m: _Measured) -> tuple[Severity, Weight]:
    severity = severity_for(m.share, high=DATALOADER_SHARE_HIGH, medium=DATALOADER_SHARE_MEDIUM)
    if m.steps is not None:
        return weigh_steps(ev, m.steps, severity, values=m.per_step, high=DATALOADER_SHARE_HIGH,
                           measure="dataloader_share")
    return weigh(severity, values=m.per_step, high=DATALOADER_SHARE_HIGH, steps=len(m.per_step),
                 basis="logged steps", measure="dataloader_share", step_us=m.step_times_us)


@rule("data_loading_bound", family="dataloading", title="DataLoader time share of the step",
      guards=Guard("dataloader_share", "lower", "DataLoader share of the step", dataloader_share))
def data_loading_bound(ev: RunEvidence) -> list[Finding]:
    """Fires when the DataLoader takes more than DATALOADER_SHARE_MIN of the step."""
    m = _measure(ev)
    share, step_us, source, chart = m.share, m.step_us, m.source, m.chart
    if share <= DATALOADER_SHARE_MIN:
        return []
    evidence: dict[str, float] = {
        "dataloader_share": share,
        "dataloader_ms_per_step": share * step_us / 1000,
        "step_ms": step_us / 1000,
        "threshold_share": DATALOADER_SHARE_MIN,
    }
    workers = as_number(config_value(ev.config, "num_workers", "workers", "dataloader_workers"))
    pin = config_value(ev.config, "pin_memory")
    if workers is not None:
        evidence["num_workers"] = workers
    if pin is not None and as_number(pin) is not None:
        evidence["pin_memory"] = float(as_number(pin) or 0)
    now = f" (num_workers={int(workers)})" if workers is not None else ""
    severity, weight = _weigh(ev, m)
    return [Finding(
        rule="data_loading_bound",
        family="dataloading",
        severity=severity, weight=weight,
        title=f"Data loading takes {format_percent(share)} of each step",
        explanation=(
            f"Measured from the {source}: the training loop waits {format_ms_of_us(share * step_us)} per step "
            f"for the next batch{now}, out of {format_ms_of_us(step_us)}. While it waits the model does no work. "
            f"Above {format_percent(DATALOADER_SHARE_MIN)} the input pipeline is worth fixing."
        ),
        evidence=evidence,
        fix_summary="Load batches in worker processes (num_workers), pin memory, keep workers "
                    "alive and prefetch, so the next batch is ready when the step ends.",
        fix=_FIX,
        expected_gain=f"up to {format_percent(share)} of step time ({format_ms_of_us(share * step_us)}/step) "
                      "when workers hide loading behind compute",
        gain_share=share,
        doc_url=DOCS["dataloader"],
        chart=chart,
    )]
