"""Advisor rule: forward passes that build an autograd graph no backward ever uses — evaluation
without torch.no_grad()/inference_mode (analysis layer).

How it is seen: torch's dispatcher records a ``Sequence number`` on an op only when it runs with
grad mode on (``Dispatcher::runRecordFunction``); the backward node the op creates carries the same
number. A forward op that creates nodes (its name pairs with backward nodes elsewhere in the trace)
but whose number no backward node ever carries built a graph that was thrown away: evaluation
or inference run with gradients enabled. Under ``no_grad``/``inference_mode`` no number is recorded.

Without that evidence (no trace, or windows that hold no evaluation) the rule reads the agent's own
signal: ``eval_grad_enabled`` on each evaluation step's metrics line (docs/run-format.md), written
at every evaluation whether profiled or not: true when the evaluation's forwards ran with grad mode
on and built a graph no backward used. Traces decide for the steps they cover; the signal speaks
for the evaluations outside them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from app.presentation.units import format_percent

from .common import DOCS, evaluation_step_numbers, events_of
from .model import Finding, MissingEvidence, RunEvidence, Severity, Weight
from .registry import rule
from .signals import in_spans

__all__ = ["eval_without_no_grad", "unused_graph_ops", "EVAL_GRAD_KEY"]

EVAL_GRAD_KEY = "eval_grad_enabled"  # the agent's per-evaluation signal in metrics.jsonl

# Ops that take a module's parameters: with grad mode on they always create a backward node
# (ops on plain data, e.g. `x.to(device)` or metric arithmetic, create none and prove nothing).
PARAM_OPS = frozenset({
    "aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm", "aten::conv1d", "aten::conv2d",
    "aten::conv3d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution",
    "aten::mkldnn_convolution", "aten::conv_transpose2d", "aten::batch_norm", "aten::native_batch_norm",
    "aten::cudnn_batch_norm", "aten::_batch_norm_impl_index", "aten::layer_norm", "aten::native_layer_norm",
    "aten::group_norm", "aten::native_group_norm", "aten::embedding", "aten::embedding_bag",
    "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit_no_training",
})
# One evaluation batch of a small model runs a few parameter ops; five is the floor for a finding.
UNUSED_OPS_MIN = 5
# Autograd bookkeeping costs roughly 10–20% of a forward pass on small ops; we claim 10% of the
# time of the unused ops, and their memory (activations stay alive as long as the graph does).
AUTOGRAD_OVERHEAD = 0.10
EVAL_PRIORITY_FLOOR = 0.03
# Backward nodes of whole scripted/compiled graphs: their inner forward ops cannot be matched.
_OPAQUE = r"DifferentiableGraphBackward|CompiledFunctionBackward"

_FIX = """\
model.eval()
with torch.inference_mode():         # or torch.no_grad()
    for x, y in val_loader:
        val_loss += loss_fn(model(x), y).item()
model.train()"""


def _is_backward(names: pd.Series) -> pd.Series:
    return names.str.contains("Backward", regex=False) | names.str.startswith("autograd::engine::evaluate_function")


def unused_graph_ops(events: pd.DataFrame, step_spans: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """Forward parameter ops of one trace that created autograd nodes no backward pass used
    (outermost ones only: a conv2d and the convolution inside it count once).

    Only ops inside completed profiler steps count (without steps: ops before the last backward),
    so a training forward whose backward fell outside the trace is not evidence.
    """
    if "sequence" not in events.columns:
        return events.iloc[0:0]
    ops = events[(events["cat"].astype(str) == "cpu_op") & events["sequence"].notna()]
    if ops.empty:
        return ops
    names = ops["name"].astype(str)
    bwd_mask = _is_backward(names)
    bwd, fwd = ops[bwd_mask], ops[~bwd_mask]
    if bwd.empty:
        return fwd.iloc[0:0]
    used_seq = set(bwd["sequence"].astype("int64"))
    fwd_seq = fwd["sequence"].astype("int64")
    used = fwd_seq.isin(used_seq).to_numpy()
    unused = fwd[~used & fwd["name"].astype(str).isin(PARAM_OPS).to_numpy()]
    unused = unused[~_touches(unused, fwd[used])]
    # Forward ops run inside a backward node are activation checkpointing's recomputation
    # (torch.utils.checkpoint): their graph is that backward's, not an evaluation's.
    unused = unused[~_touches(unused, events[_is_backward(events["name"].astype(str))])]
    unused = _outermost(unused)
    if step_spans is not None and len(step_spans[0]):
        # Inside a completed ProfilerStep a forward without backward is real; outside every step
        # (a trace exported mid-step) it may be a training forward whose backward was not recorded.
        return unused[in_spans(unused["ts_us"].to_numpy(float), *step_spans)]
    return unused[unused["ts_us"].to_numpy(float) < float(bwd["ts_us"].max())]


def _outermost(ops: pd.DataFrame) -> pd.DataFrame:
    """Drop ops nested in another op of the same table and thread (aten::convolution inside
    aten::conv2d), so counts and times are not doubled."""
    keep = np.ones(len(ops), dtype=bool)
    for idx in ops.groupby("tid", observed=True).indices.values():
        s = ops["ts_us"].to_numpy(float)[idx]
        e = s + ops["dur_us"].to_numpy(float)[idx]
        order = np.lexsort((-e, s))
        prev_max = np.concatenate([[-np.inf], np.maximum.accumulate(e[order])[:-1]])
        keep[idx[order]] = prev_max < e[order]
    return ops[keep]


def _touches(cands: pd.DataFrame, used: pd.DataFrame) -> np.ndarray:
    """True for candidates nested in, or containing, an op whose node a backward used (an op inside a
    compiled/scripted region or composite op is covered by the enclosing op's node)."""
    out = np.zeros(len(cands), dtype=bool)
    if cands.empty or used.empty:
        return out
    for tid, idx in cands.groupby("tid", observed=True).indices.items():
        u = used[used["tid"] == tid]
        if u.empty:
            continue
        us = u["ts_us"].to_numpy(float)
        ue = us + u["dur_us"].to_numpy(float)
        c = cands.iloc[idx]
        cs = c["ts_us"].to_numpy(float)
        ce = cs + c["dur_us"].to_numpy(float)
        order = np.argsort(us)
        us, ue = us[order], ue[order]
        max_end = np.maximum.accumulate(ue)
        # nested in a used op: some used op starting before cs ends after ce
        k = np.searchsorted(us, cs, side="right") - 1
        inside = (k >= 0) & (max_end[np.maximum(k, 0)] >= ce)
        # containing a used op: a used op starts within [cs, ce]
        lo, hi = np.searchsorted(us, cs, side="left"), np.searchsorted(us, ce, side="right")
        out[idx] = inside | (hi > lo)
    return out


def _no_grad_param_ops(events: pd.DataFrame, spans: tuple[np.ndarray, np.ndarray] | None) -> int:
    """Parameter ops run without grad mode: no sequence number, and not nested in (or around) an op
    that has one (ops below the autograd layer, e.g. aten::_convolution in aten::convolution, never
    carry a number). These are a no_grad/inference_mode forward."""
    if "sequence" not in events.columns:
        return 0
    cpu = events[events["cat"].astype(str) == "cpu_op"]
    ops = cpu[cpu["sequence"].isna() & cpu["name"].astype(str).isin(PARAM_OPS)]
    if spans is not None and len(spans[0]):
        ops = ops[in_spans(ops["ts_us"].to_numpy(float), *spans)]
    return int((~_touches(ops, cpu[cpu["sequence"].notna()])).sum())


def _evaluation_steps(ev: RunEvidence) -> tuple[list[int], list[int]]:
    """(the run's evaluation steps, those among the profiled steps): the agent's ``"evaluation": true``
    or a val_*/eval_* value logged at the step (common.evaluation_step_numbers)."""
    evals = sorted(evaluation_step_numbers(ev))
    profiled = set(pd.to_numeric(ev.steps["step"], errors="coerce").dropna().astype(int)) if "step" in ev.steps.columns else set()
    return evals, [s for s in evals if s in profiled]


def _nothing_seen(evals: list[int], profiled_evals: list[int]) -> str:
    """Why the rule cannot judge a run whose profiled steps show no forward outside training."""
    if profiled_evals:
        return (f"profiled step(s) {', '.join(f'#{s}' for s in profiled_evals[:5])} held an evaluation, but the "
                "trace shows no layer calls outside training there (ops this rule does not know, or compiled)")
    if evals:
        return (f"the run evaluated at step(s) {', '.join(str(s) for s in evals[:5])}{'…' if len(evals) > 5 else ''}, "
                "none of them profiled: profile an evaluation step (torchscope run --wait/--active)")
    return ("the profiled steps hold no forward pass outside training: evaluation, if any, "
            "ran outside the profiler window")


@rule("eval_without_no_grad", family="evaluation", title="Forward passes build graphs no backward uses")
def eval_without_no_grad(ev: RunEvidence) -> list[Finding]:
    """Fires when ≥ UNUSED_OPS_MIN graph-building forward ops never reach a backward pass, or, for the
    evaluations the traces do not cover, when the agent marked one ``eval_grad_enabled``.

    Raises MissingEvidence when neither the traces nor the agent's signal can judge the run.
    """
    signal = _agent_signal(ev)
    profiled = _profiled_steps(ev)
    try:
        findings = _from_traces(ev)
    except MissingEvidence as e:
        if signal is None:
            raise
        judged_by_trace: set[int] = set()
        why = f"the traces cannot tell ({e})" if any(s in profiled for s in signal["with_grad"]) else ""
    else:
        if findings or signal is None:
            return findings
        judged_by_trace, why = profiled, ""
    with_grad = [s for s in signal["with_grad"] if s not in judged_by_trace]
    if not with_grad:
        return []
    if not why:
        why = ("none of them inside a profiler window, so the trace cannot show their cost" if ev.traces
               else "the run has no profiler trace")
    return [_from_agent(ev, with_grad, signal, profiled, why)]


def _agent_signal(ev: RunEvidence) -> dict[str, list[int]] | None:
    """The evaluation steps the agent judged (``eval_grad_enabled`` present), split by its value;
    None when the run has no such key (no evaluation, a bare trace, or an older agent)."""
    m = ev.metrics
    if not ev.has_run or m is None or len(m) == 0 or not {EVAL_GRAD_KEY, "step"} <= set(m.columns):
        return None
    flag = pd.to_numeric(m[EVAL_GRAD_KEY], errors="coerce")
    step = pd.to_numeric(m["step"], errors="coerce")
    judged = flag.notna() & step.notna()
    if not judged.any():
        return None
    on = sorted({int(s) for s in step[judged & (flag == 1)]})
    off = sorted({int(s) for s in step[judged & (flag == 0)]} - set(on))
    return {"with_grad": on, "without_grad": off}


def _profiled_steps(ev: RunEvidence) -> set[int]:
    if "step" not in ev.steps.columns:
        return set()
    return set(pd.to_numeric(ev.steps["step"], errors="coerce").dropna().astype(int))


def _evaluation_excess_share(ev: RunEvidence, steps: list[int]) -> float:
    """Time of ``steps`` beyond a median training step, as a share of all steps' time (0 when unknown)."""
    m = ev.metrics
    if m is None or "step_time_s" not in m.columns:
        return 0.0
    rows = m[pd.to_numeric(m["step_time_s"], errors="coerce").notna()]
    if "rank" in rows.columns and rows["rank"].notna().any():
        rows = rows[rows["rank"] == rows["rank"].min()]
    t = pd.to_numeric(rows["step_time_s"], errors="coerce").to_numpy(float)
    numbers = pd.to_numeric(rows["step"], errors="coerce").to_numpy(float)
    evals = np.isin(numbers, list(evaluation_step_numbers(ev)))
    total = float(t.sum())
    if total <= 0 or evals.all():
        return 0.0
    typical = float(np.median(t[~evals]))
    excess = float(np.clip(t[np.isin(numbers, steps)] - typical, 0, None).sum())
    return excess / total


def _from_agent(ev: RunEvidence, with_grad: list[int], signal: dict[str, list[int]], profiled: set[int],
                where: str) -> Finding:
    """The finding from the agent's signal: evaluations with grad mode on that no trace covers."""
    judged = len(signal["with_grad"]) + len(signal["without_grad"])
    listed = ", ".join(str(s) for s in with_grad[:5]) + ("…" if len(with_grad) > 5 else "")
    share = _evaluation_excess_share(ev, with_grad)
    n = len(with_grad)
    return Finding(
        rule="eval_without_no_grad", family="evaluation", severity=Severity.MEDIUM,
        title=f"{n} evaluation{'s' if n != 1 else ''} ran with gradients enabled (eval without no_grad?)",
        explanation=(
            f"The agent saw the model evaluated with grad mode on at step{'s' if n != 1 else ''} {listed} "
            f"({n} of the {judged} evaluations it judged): its forward passes built autograd graphs that "
            f"no backward used; {where}. Those steps took {format_percent(share)} of the run's step time beyond "
            f"a typical training step. The graph keeps every activation alive until the output is dropped."
        ),
        evidence={"evaluations_with_grad": n, "evaluations_judged": judged,
                  "evaluation_steps_profiled": len(set(signal["with_grad"]) & profiled),
                  "evaluation_excess_share": share},
        fix_summary="Wrap evaluation/inference in torch.inference_mode() (or torch.no_grad()).",
        fix=_FIX,
        expected_gain="less memory during evaluation (no saved activations) and a faster evaluation loop",
        gain_share=max(EVAL_PRIORITY_FLOOR, share * AUTOGRAD_OVERHEAD), doc_url=DOCS["no_grad"],
        chart="Steps › evaluation steps", step=with_grad[0],
        weight=Weight(steps=n, basis="evaluations"),
    )


def _from_traces(ev: RunEvidence) -> list[Finding]:
    """The trace evidence: findings, [] for a clean bill, MissingEvidence when the traces cannot tell."""
    if not ev.traces:
        raise MissingEvidence("needs a profiler trace")
    total_unused, unused_us, total_us, seen_seq, opaque, no_grad_ops = 0, 0.0, 0.0, False, False, 0
    names: dict[str, int] = {}
    for rank, events in events_of(ev):
        if "sequence" in events.columns and events["sequence"].notna().any():
            seen_seq = True
        opaque = opaque or bool(events["name"].astype(str).str.contains(_OPAQUE).any())
        steps = ev.steps[ev.steps["rank"] == rank] if "rank" in ev.steps.columns else pd.DataFrame()
        spans = (steps["host_start_us"].to_numpy(float), steps["host_end_us"].to_numpy(float)) if len(steps) else None
        unused = unused_graph_ops(events, spans)
        no_grad_ops += _no_grad_param_ops(events, spans)
        total_unused += len(unused)
        unused_us += float(unused["dur_us"].sum())
        for n, c in unused["name"].astype(str).value_counts().head(5).items():
            names[n] = names.get(n, 0) + int(c)
        total_us += float(steps["duration_us"].sum()) if len(steps) else 0.0
    if opaque:
        raise MissingEvidence("scripted/compiled graphs (DifferentiableGraph/CompiledFunction) hide which forward ops their backward used")
    if not seen_seq:
        raise MissingEvidence("the trace has no autograd sequence numbers (no grad-mode ops or no backward recorded)")
    evals, profiled_evals = _evaluation_steps(ev)
    if total_unused < UNUSED_OPS_MIN:
        if total_unused == 0 and no_grad_ops == 0:
            raise MissingEvidence(_nothing_seen(evals, profiled_evals))
        return []
    share = unused_us / total_us if total_us > 0 else 0.0
    top = ", ".join(f"{n} ×{c}" for n, c in sorted(names.items(), key=lambda x: -x[1])[:3])
    marked = (f" The run marks profiled step{'s' if len(profiled_evals) > 1 else ''} "
              f"{', '.join(f'#{s}' for s in profiled_evals[:5])} as holding an evaluation." if profiled_evals else "")
    return [Finding(
        rule="eval_without_no_grad", family="evaluation", severity=Severity.MEDIUM,
        title=f"{total_unused} layer calls built autograd graphs that no backward used (eval without no_grad?)",
        explanation=(
            f"These ops ran with gradients enabled and recorded backward nodes, but no backward pass ever "
            f"consumed them ({top}); they take {unused_us / 1000:.1f} ms ({format_percent(share)} of the profiled "
            f"steps). This is evaluation or inference without torch.no_grad(): the graph keeps every "
            f"activation alive until the output is dropped.{marked}"
        ),
        evidence={"unused_graph_ops": total_unused, "unused_ops_ms": unused_us / 1000, "unused_share": share,
                  "evaluation_steps_profiled": len(profiled_evals)},
        fix_summary="Wrap evaluation/inference in torch.inference_mode() (or torch.no_grad()).",
        fix=_FIX,
        expected_gain="less memory during evaluation (no saved activations) and a faster evaluation loop",
        gain_share=max(EVAL_PRIORITY_FLOOR, share * AUTOGRAD_OVERHEAD), doc_url=DOCS["no_grad"],
        chart="Operators › ops with sequence numbers; Timeline › forward without backward",
    )]
