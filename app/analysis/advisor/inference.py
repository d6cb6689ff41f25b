"""Advisor rules for inference runs: grad mode, eval mode, batch size 1, per-call host overhead (analysis layer).

They read an inference run's per-call lines (``"inference": true`` in metrics.jsonl, written by
profiler_agent/inference.py; docs/run-format.md "Inference runs"): ``grad_enabled`` and
``train_mode`` are read by the agent at each call's forward pre-hook (``torch.is_grad_enabled()``
and ``module.training``), ``samples`` is the call's batch, ``idle_s`` the time since the previous
call ended. The host-overhead rule reads the profiled calls in the traces: a call's latency
against the time its outermost operators ran. Every rule raises MissingEvidence on a run that
is not an inference run, so the advisor says "not checked" rather than "fine" there.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from app.presentation.units import format_percent, format_seconds

from .common import DOCS, events_of
from .model import Finding, MissingEvidence, RunEvidence, Severity, Weight
from .registry import rule

__all__ = ["is_inference_run", "inference_calls", "inference_grad_enabled", "inference_train_mode", "inference_batch_one",
           "inference_host_overhead", "outermost_op_us"]

INFERENCE_KEY = "inference"
SHARE_MIN = 0.5  # grad mode / train mode on in at least half the steady calls
BATCH_ONE_MIN_CALLS = 20  # batch-1 calls needed before suggesting batching
OVERHEAD_MIN_SHARE = 0.30  # host time between the operators >= 30 % of the call's operator span
OVERHEAD_MIN_OPS = 5  # outermost operators per call (a scripted or compiled model shows one or a few)
OVERHEAD_MAX_OP_US = 50.0  # ... and small operators (median outermost operator time)
_PRIORITY = {"grad": 0.05, "train": 0.04, "batch": 0.03}

_NO_GRAD_FIX = """\
model.eval()
with torch.inference_mode():          # no autograd graph, no saved activations
    for request in requests:
        answer(model(request))"""
_EVAL_FIX = """\
model = build_model()
model.load_state_dict(state)
model.eval()                           # dropout off, batch norm uses its running statistics"""
_BATCH_FIX = """\
batch = torch.stack(pending[:max_batch])   # gather waiting requests
with torch.inference_mode():
    outputs = model(batch)                 # one call, many samples"""
_SCRIPT_FIX = """\
server = torch.jit.script(model.eval())    # or torch.jit.trace(model, example)
# or: server = torch.compile(model.eval())  (first calls compile; later ones run the fused graph)
with torch.inference_mode():
    y = server(x)"""


def is_inference_run(ev: RunEvidence) -> bool:
    """True when the run's metrics hold inference calls (``"inference": true`` lines: model calls
    with no optimizer step, as the agent recorded them)."""
    m = ev.metrics
    return bool(ev.has_run and m is not None and INFERENCE_KEY in m.columns and _flag(m[INFERENCE_KEY]).any())


def inference_calls(ev: RunEvidence) -> pd.DataFrame:
    """The run's steady inference calls (not warm-up, compile or profiled): ``step``,
    ``step_time_s``, ``samples``, ``idle_s``, ``grad_enabled``, ``train_mode``; raises
    MissingEvidence when the run has none (not an inference run)."""
    m = ev.metrics
    if not ev.has_run or m is None or INFERENCE_KEY not in m.columns or "step_time_s" not in m.columns:
        raise MissingEvidence("needs an inference run (model calls without optimizer steps)")
    calls = m[_flag(m[INFERENCE_KEY])].copy()
    if calls.empty:
        raise MissingEvidence("needs an inference run (model calls without optimizer steps)")
    if "rank" in calls.columns and (calls["rank"] == 0).any():
        calls = calls[calls["rank"] == 0]
    dropped = np.zeros(len(calls), dtype=bool)
    for key in ("warmup", "compile", "profiled"):
        if key in calls.columns:
            dropped |= _flag(calls[key]).to_numpy()
    steady = calls[~dropped] if (~dropped).any() else calls
    out = pd.DataFrame({"step": steady["step"].to_numpy(),
                        "step_time_s": pd.to_numeric(steady["step_time_s"], errors="coerce").to_numpy(float)})
    for key in ("samples", "idle_s"):
        out[key] = pd.to_numeric(steady[key], errors="coerce").to_numpy(float) if key in steady.columns else np.nan
    for key in ("grad_enabled", "train_mode"):
        out[key] = _flag(steady[key]).to_numpy() if key in steady.columns else False
    return out


def _flag(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col, errors="coerce").fillna(0.0) != 0


def _weight(calls: pd.DataFrame, measure: str = "") -> Weight:
    ms = calls["step_time_s"].to_numpy(float) * 1e3
    return Weight(steps=len(calls), basis="inference calls", measure=measure,
                  step_ms=(float(np.nanmin(ms)), float(np.nanmax(ms))) if len(ms) else None)


@rule("inference_grad_enabled", family="inference", title="Inference runs with autograd on (no inference_mode)")
def inference_grad_enabled(ev: RunEvidence) -> list[Finding]:
    calls = inference_calls(ev)
    n_grad = int(calls["grad_enabled"].sum())
    share = n_grad / len(calls)
    if share < SHARE_MIN:
        return []
    return [Finding(
        rule="inference_grad_enabled", family="inference", severity=Severity.MEDIUM,
        title=f"{n_grad} of {len(calls)} model calls ran with grad mode on",
        explanation=(f"The agent saw torch.is_grad_enabled() true at the start of {format_percent(share)} of the "
                     "steady inference calls: each call records an autograd graph and keeps its activations "
                     "alive until the output is dropped, for a backward that never comes."),
        evidence={"grad_enabled_calls": n_grad, "inference_calls": len(calls), "grad_enabled_share": share},
        fix_summary="Serve under torch.inference_mode() (or torch.no_grad()).", fix=_NO_GRAD_FIX,
        expected_gain="less memory per call (no saved activations) and less per-op bookkeeping",
        gain_share=_PRIORITY["grad"], doc_url=DOCS["no_grad"],
        chart="Curves › step_time_s; metrics.jsonl grad_enabled per call", weight=_weight(calls, "grad_enabled"))]


def _train_mode_layers(tree: Mapping[str, Any] | None) -> int:
    """Dropout and batch-norm layers in the module tree (they behave differently in train mode)."""
    if not tree:
        return 0
    count = 0
    stack = [tree.get("root", tree)]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        kind = str(node.get("type", ""))
        count += ("Dropout" in kind) or ("BatchNorm" in kind)
        stack.extend(node.get("children") or [])
    return count


@rule("inference_train_mode", family="inference", title="Inference runs the model in train mode (no model.eval())")
def inference_train_mode(ev: RunEvidence) -> list[Finding]:
    calls = inference_calls(ev)
    n_train = int(calls["train_mode"].sum())
    share = n_train / len(calls)
    if share < SHARE_MIN:
        return []
    layers = _train_mode_layers(ev.module_tree)
    which = (f"; the model has {layers} dropout/batch-norm layer(s), whose outputs differ in train mode"
             if layers else "")
    return [Finding(
        rule="inference_train_mode", family="inference", severity=Severity.MEDIUM if layers else Severity.LOW,
        title=f"{n_train} of {len(calls)} model calls ran with model.training = True",
        explanation=(f"The model's root was in train mode at {format_percent(share)} of the steady inference "
                     f"calls (module.training at its forward){which}. Answers change from call to call "
                     "(dropout) or depend on the batch (batch norm)."),
        evidence={"train_mode_calls": n_train, "inference_calls": len(calls), "train_mode_share": share,
                  "dropout_batchnorm_layers": layers},
        fix_summary="Call model.eval() before serving.", fix=_EVAL_FIX,
        expected_gain="correct, deterministic outputs; batch norm no longer updates its statistics",
        gain_share=_PRIORITY["train"], doc_url="https://pytorch.org/docs/stable/generated/torch.nn.Module.html"
        "#torch.nn.Module.eval", chart="metrics.jsonl train_mode per call", weight=_weight(calls, "train_mode"))]


@rule("inference_batch_one", family="inference", title="Inference answers one sample per call while requests wait")
def inference_batch_one(ev: RunEvidence) -> list[Finding]:
    calls = inference_calls(ev)
    samples = calls["samples"].to_numpy(float)
    if not np.isfinite(samples).any():
        raise MissingEvidence("the calls' batch sizes were not recorded")
    if len(calls) < BATCH_ONE_MIN_CALLS or float(np.nanmedian(samples)) != 1.0:
        return []
    latency = float(np.nanmedian(calls["step_time_s"]))
    idle = calls["idle_s"].to_numpy(float)
    idle_med = float(np.nanmedian(idle)) if np.isfinite(idle).any() else float("nan")
    # Calls back to back (idle shorter than a call): the next request was already there to batch.
    if not (idle_med < latency):
        return []
    return [Finding(
        rule="inference_batch_one", family="inference", severity=Severity.LOW,
        title=f"{len(calls)} calls of batch 1, back to back ({format_seconds(idle_med)} idle between calls)",
        explanation=(f"Every steady call answered one sample in {format_seconds(latency)} (median), and the next "
                     f"call started {format_seconds(idle_med)} later: requests were waiting, so several could "
                     "share one call and the per-call fixed cost (dispatch, kernel launches, Python)."),
        evidence={"inference_calls": len(calls), "batch_median": 1.0, "latency_median_s": latency,
                  "idle_median_s": idle_med},
        fix_summary="Batch the waiting requests into one call.", fix=_BATCH_FIX,
        expected_gain="higher throughput (samples/s); latency per request grows by the batching wait",
        gain_share=_PRIORITY["batch"], doc_url=DOCS["tuning"], chart="Curves › samples, step_time_s",
        weight=_weight(calls, "samples"))]


def outermost_op_us(events: pd.DataFrame, start_us: float, end_us: float) -> tuple[float, float, int, float]:
    """(time covered by outermost CPU operators, the span from the first one's start to the last
    one's end, their count, their median duration) in [start_us, end_us], per thread summed; an
    operator nested in another is counted once."""
    ops = events[(events["cat"].astype(str) == "cpu_op") & (events["ts_us"] >= start_us)
                 & (events["ts_us"] + events["dur_us"] <= end_us)]
    covered, span, durations = 0.0, 0.0, []
    for _, g in ops.groupby(ops["tid"].astype(str), observed=True):
        end, first = -np.inf, None
        for ts, dur in sorted(zip(g["ts_us"].to_numpy(float), g["dur_us"].to_numpy(float))):
            first = ts if first is None else first
            if ts >= end:
                covered += dur
                durations.append(dur)
                end = ts + dur
            elif ts + dur > end:  # overlaps the previous outermost op's end: only the extra time
                covered += ts + dur - end
                end = ts + dur
        if first is not None:
            span += end - first
    return covered, span, len(durations), float(np.median(durations)) if durations else float("nan")


@rule("inference_host_overhead", family="inference",
      title="Per-call host overhead that TorchScript or torch.compile would remove")
def inference_host_overhead(ev: RunEvidence) -> list[Finding]:
    calls = inference_calls(ev)  # an inference run, or MissingEvidence
    steps = ev.steps
    if steps.empty or not {"step", "start_us", "end_us"} <= set(steps.columns):
        raise MissingEvidence("needs profiled inference calls (ProfilerStep#N) in a trace")
    shares, counts, medians = [], [], []
    for rank, events in events_of(ev):
        own = steps[steps["rank"] == rank] if "rank" in steps.columns else steps
        for s in own.itertuples(index=False):
            op_us, span_us, n_ops, med = outermost_op_us(events, float(s.start_us), float(s.end_us))
            if n_ops == 0 or span_us <= 0:
                continue
            shares.append(max(0.0, 1.0 - op_us / span_us))
            counts.append(n_ops)
            medians.append(med)
    if not shares:
        raise MissingEvidence("no profiled inference call has operators in the trace")
    share, ops_per_call, op_med = float(np.median(shares)), float(np.median(counts)), float(np.median(medians))
    if share < OVERHEAD_MIN_SHARE or ops_per_call < OVERHEAD_MIN_OPS or op_med > OVERHEAD_MAX_OP_US:
        return []
    lat_med = float(np.nanmedian(calls["step_time_s"]))
    return [Finding(
        rule="inference_host_overhead", family="inference", severity=Severity.MEDIUM if share >= 0.5 else Severity.LOW,
        title=f"{format_percent(share)} of each call is host time between {ops_per_call:.0f} small operators",
        explanation=(f"In {len(shares)} profiled calls, the outermost operators ({ops_per_call:.0f} per call, "
                     f"median {op_med:.1f} µs each) covered only {format_percent(1 - share)} of the time from the "
                     f"call's first operator to its last (median latency {format_seconds(lat_med)}): the rest is "
                     "Python between operators (module calls, hooks, dispatch), which a scripted or compiled "
                     "model runs without the interpreter (its trace shows one outer operator per call)."),
        evidence={"host_overhead_share": share, "ops_per_call": ops_per_call, "op_median_us": op_med,
                  "profiled_calls": len(shares), "latency_median_s": lat_med},
        fix_summary="Serve a TorchScript or torch.compile'd model.", fix=_SCRIPT_FIX,
        expected_gain=f"up to {format_percent(share)} of the per-call latency",
        gain_share=share * 0.5, doc_url=DOCS["compile"], chart="Timeline › gaps between operators in a call",
        weight=Weight(steps=len(shares), windows=len(ev.windows), basis="profiled calls", measure="host_overhead_share",
                      spread=(float(min(shares)), float(max(shares)))))]
