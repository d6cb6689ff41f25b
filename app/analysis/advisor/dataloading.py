"""Advisor rules about the input pipeline: DataLoader time inside the training step (analysis layer)."""
from __future__ import annotations

from app.analysis.step_window import typical_steps

from .common import DOCS, as_number, config_value, fmt_ms, fmt_pct, require_steps, severity_for, step_share
from .model import Finding, MissingEvidence, RunEvidence
from .registry import rule

__all__ = ["data_loading_bound", "DATALOADER_SHARE_MIN"]

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


def _share_from_metrics(ev: RunEvidence) -> tuple[float, float]:
    m = ev.metrics
    if not ev.has_run or m is None or "data_time_s" not in m.columns or "step_time_s" not in m.columns:
        raise MissingEvidence("needs DataLoader time: a trace with ProfilerStep#N or a data_time_s curve")
    data = m["data_time_s"].astype(float)
    step = m["step_time_s"].astype(float)
    ok = data.notna() & step.notna() & (step > 0)
    if not ok.any():
        raise MissingEvidence("data_time_s and step_time_s were never logged together")
    return float(data[ok].sum() / step[ok].sum()), float(step[ok].mean() * 1e6)


@rule("data_loading_bound", family="dataloading", title="DataLoader time share of the step")
def data_loading_bound(ev: RunEvidence) -> list[Finding]:
    """Fires when the DataLoader takes more than DATALOADER_SHARE_MIN of the step."""
    try:
        # Profiled steps that also ran an evaluation pass are not training steps: left out
        # when others remain, as in the Compare breakdown (app.analysis.step_window).
        steps = typical_steps(require_steps(ev, "dataloader_us"), ev.metrics if ev.has_run else None).steps
        share = step_share(steps, "dataloader_us")
        step_us = float(steps["duration_us"].astype(float).mean())
        source, chart = "trace", "Overview › step time breakdown (DataLoader)"
    except MissingEvidence:
        share, step_us = _share_from_metrics(ev)
        source, chart = "metrics", "Metrics › data_time_s vs step_time_s"
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
    return [Finding(
        rule="data_loading_bound",
        family="dataloading",
        severity=severity_for(share, high=DATALOADER_SHARE_HIGH, medium=DATALOADER_SHARE_MEDIUM),
        title=f"Data loading takes {fmt_pct(share)} of each step",
        explanation=(
            f"Measured from the {source}: the training loop waits {fmt_ms(share * step_us)} per step "
            f"for the next batch{now}, out of {fmt_ms(step_us)}. While it waits the model does no work. "
            f"Above {fmt_pct(DATALOADER_SHARE_MIN)} the input pipeline is worth fixing."
        ),
        evidence=evidence,
        fix_summary="Load batches in worker processes (num_workers), pin memory, keep workers "
                    "alive and prefetch, so the next batch is ready when the step ends.",
        fix=_FIX,
        expected_gain=f"up to {fmt_pct(share)} of step time ({fmt_ms(share * step_us)}/step) "
                      "when workers hide loading behind compute",
        gain_share=share,
        doc_url=DOCS["dataloader"],
        chart=chart,
    )]
