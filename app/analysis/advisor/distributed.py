"""Advisor rules for multi-GPU jobs: DataParallel, exposed communication, straggling ranks (analysis layer)."""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd

from app.presentation.units import format_ms_of_us, format_percent

from .common import DOCS, events_of, require_device_trace, severity_for, weigh, weigh_steps
from .model import Finding, MissingEvidence, RunEvidence, Severity, Weight
from .registry import rule
from .signals import by_cat, in_spans, is_comm_kernel, merged_busy_us, overlap_us

__all__ = ["data_parallel_used", "comm_not_overlapped", "rank_stragglers"]

# Communication not hidden behind compute above 10% of the step: torch-tb-profiler's bar for
# "high time cost on communication".
EXPOSED_COMM_SHARE_MIN = 0.10
EXPOSED_COMM_SHARE_HIGH = 0.30
# One rank 15% slower than the median of the others holds all of them back at every collective;
# 15% is above the step-to-step noise of a typical job (a few %).
STRAGGLER_RATIO_MIN = 1.15
STRAGGLER_RATIO_HIGH = 1.5
DATA_PARALLEL_PRIORITY = 0.3
# A wrapper that replicated nothing costs nothing now: the finding is a note for the multi-GPU move.
DATA_PARALLEL_PRIORITY_IDLE = 0.02
# Backward nodes of DataParallel's scatter/replicate/gather Python autograd Functions ("GatherBackward";
# aten::gather's node is "GatherBackward0", hence the anchored end).
_DP_OPS = re.compile(r"^(?:Broadcast|Scatter|Gather|ReduceAddCoalesced)Backward$|^DataParallel\.forward")
# The replication part of those: without any (DataParallel.forward ranges only) the wrapper had at most
# one device and called the module itself (no GPU: torch gives it no device_ids), so there was nothing
# to replicate or gather, and no cost the trace can show (measured on sample_models/variants/data_parallel.py).
_DP_REPLICATION = re.compile(r"^(?:Broadcast|Scatter|Gather|ReduceAddCoalesced)Backward$")

_DP_FIX = """\
# torchrun --nproc_per_node=NUM_GPUS train.py
torch.distributed.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(local_rank)
model = torch.nn.parallel.DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])
sampler = torch.utils.data.distributed.DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=bs, sampler=sampler, num_workers=4, pin_memory=True)"""

_COMM_FIX = """\
model = DistributedDataParallel(model, device_ids=[rank],
                                bucket_cap_mb=50,              # tune overlap granularity
                                gradient_as_bucket_view=True)  # fewer copies
# accumulate gradients without syncing every micro-batch:
with model.no_sync():
    loss_fn(model(x1), y1).backward()
loss_fn(model(x2), y2).backward()   # all-reduce overlaps this backward"""

_STRAGGLER_FIX = """\
# equalise work per rank: same batch size and sequence lengths (bucket by length), same data
# pipeline speed (num_workers per rank), no rank-0-only work inside the step (logging, checkpoints):
if rank == 0 and step % 1000 == 0:
    save_checkpoint()       # move out of the step or do it asynchronously"""


def _module_types(tree: Mapping[str, Any] | None) -> Iterator[str]:
    if not tree:
        return
    # graph/modules.json holds the tree under "root"; a bare node is taken as the root itself.
    stack = [tree.get("root", tree)]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            yield str(node.get("type", ""))
            stack.extend(node.get("children") or [])


@rule("data_parallel_used", family="distributed", title="nn.DataParallel instead of DistributedDataParallel")
def data_parallel_used(ev: RunEvidence) -> list[Finding]:
    """Fires when the module tree or the trace shows torch.nn.DataParallel."""
    if ev.module_tree is None and not ev.traces:
        raise MissingEvidence("needs the module tree or a trace")
    in_tree = any(t == "DataParallel" for t in _module_types(ev.module_tree))
    dp_ops = replication = 0
    for _, events in events_of(ev):
        names = events["name"].astype(str)
        dp_ops += int(names.str.contains(_DP_OPS).sum())
        replication += int(names.str.contains(_DP_REPLICATION).sum())
    if not in_tree and dp_ops == 0:
        return []
    # Only a trace can say the wrapper replicated nothing; the module tree alone cannot.
    idle = dp_ops > 0 and replication == 0
    seen = (f"Seen in {'the module tree' if in_tree else ''}{' and ' if in_tree and dp_ops else ''}"
            f"{f'{dp_ops} DataParallel ops in the trace' if dp_ops else ''}.")
    if idle:
        seen += (" The trace holds no replication (no Broadcast/Scatter/Gather nodes): here the wrapper ran on at "
                 "most one device and called the module itself, which costs nothing measurable; the cost "
                 "appears with several GPUs.")
    return [Finding(
        rule="data_parallel_used", family="distributed", severity=Severity.LOW if idle else Severity.HIGH,
        title="Training uses nn.DataParallel" if idle else "Multi-GPU training uses nn.DataParallel",
        explanation=(
            "DataParallel runs one Python process that scatters each batch, replicates the model to every "
            "GPU on every step and gathers the outputs on GPU 0; the GIL and GPU 0's extra work cap its "
            f"scaling. {seen}"
        ),
        evidence={"in_module_tree": int(in_tree), "data_parallel_ops": dp_ops, "replication_ops": replication},
        fix_summary="Use DistributedDataParallel with one process per GPU (torchrun).",
        fix=_DP_FIX,
        expected_gain=("nothing on this run (no replication); on several GPUs typically 1.5–3× throughput" if idle
                       else "typically 1.5–3× throughput on multi-GPU machines"),
        gain_share=DATA_PARALLEL_PRIORITY_IDLE if idle else DATA_PARALLEL_PRIORITY, doc_url=DOCS["ddp_instead"], chart="Graph › module tree; Timeline",
    )]


def _exposed_per_step(steps: pd.DataFrame, s: np.ndarray, e: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """Exposed communication (not overlapping compute kernels) as a share of each step."""
    out = []
    for start, end, dur in zip(steps["start_us"].to_numpy(float), steps["end_us"].to_numpy(float),
                               steps["duration_us"].to_numpy(float)):
        k = (s >= start) & (s <= end)
        c, o = k & comm, k & ~comm
        exposed = merged_busy_us(s[c], e[c]) - overlap_us(s[c], e[c], s[o], e[o])
        out.append(exposed / dur if dur > 0 else 0.0)
    return np.asarray(out)


def _comm_per_rank(ev: RunEvidence) -> pd.DataFrame:
    rows = []
    for rank, events in events_of(ev):
        steps = ev.steps[ev.steps["rank"] == rank] if "rank" in ev.steps.columns else pd.DataFrame()
        kernels = by_cat(events, ("kernel",))
        if steps.empty or kernels.empty:
            continue
        kernels = kernels[in_spans(kernels["ts_us"].to_numpy(float), steps["start_us"].to_numpy(float), steps["end_us"].to_numpy(float))]
        comm = is_comm_kernel(kernels["name"]).to_numpy()
        if not comm.any():
            continue
        s, e = kernels["ts_us"].to_numpy(float), (kernels["ts_us"] + kernels["dur_us"]).to_numpy(float)
        comm_us = merged_busy_us(s[comm], e[comm])
        hidden = overlap_us(s[comm], e[comm], s[~comm], e[~comm])
        rows.append({"rank": rank, "comm_us": comm_us, "exposed_us": comm_us - hidden,
                     "total_us": float(steps["duration_us"].sum()), "steps": len(steps),
                     "per_step": _exposed_per_step(steps, s, e, comm)})
    if not rows:
        raise MissingEvidence("needs communication kernels (NCCL/RCCL) in a GPU trace")
    return pd.DataFrame(rows)


@rule("comm_not_overlapped", family="distributed", title="Communication not overlapped with compute")
def comm_not_overlapped(ev: RunEvidence) -> list[Finding]:
    """Fires when collective kernels not overlapping compute kernels take ≥ EXPOSED_COMM_SHARE_MIN of the step."""
    require_device_trace(ev)
    per = _comm_per_rank(ev)
    per["share"] = per["exposed_us"] / per["total_us"]
    w = per.loc[per["share"].idxmax()]
    if w["share"] < EXPOSED_COMM_SHARE_MIN:
        return []
    overlapped = 1 - w["exposed_us"] / w["comm_us"] if w["comm_us"] > 0 else 0.0
    severity, weight = weigh_steps(ev, ev.steps[ev.steps["rank"] == int(w["rank"])],
                                   severity_for(float(w["share"]), high=EXPOSED_COMM_SHARE_HIGH, medium=0.15),
                                   values=w["per_step"], high=EXPOSED_COMM_SHARE_HIGH, measure="exposed_comm_share")
    return [Finding(
        rule="comm_not_overlapped", family="distributed",
        severity=severity, weight=weight,
        title=f"Exposed communication: {format_percent(float(w['share']))} of the step waits on collectives",
        explanation=(
            f"On rank {int(w['rank'])} collectives run {format_ms_of_us(w['comm_us'] / w['steps'])} per step and only "
            f"{format_percent(overlapped)} of that overlaps compute kernels; {format_ms_of_us(w['exposed_us'] / w['steps'])} "
            f"per step the GPU only communicates."
        ),
        evidence={"exposed_comm_share": float(w["share"]), "comm_ms_per_step": w["comm_us"] / w["steps"] / 1000,
                  "overlapped_share": overlapped, "rank": int(w["rank"])},
        fix_summary="Let DDP overlap all-reduce with backward (bucket size, no_sync for accumulation), "
                    "cut traffic (larger per-GPU batch, compression hooks).",
        fix=_COMM_FIX,
        expected_gain=f"up to {format_percent(float(w['share']) * 0.5)} of step time",
        gain_share=float(w["share"]) * 0.5, doc_url=DOCS["ddp"], chart="Overview › step breakdown (Communication); Timeline › NCCL stream",
        rank=int(w["rank"]),
    )]


def _rank_step_table(ev: RunEvidence) -> tuple[pd.DataFrame, str]:
    """Step times in seconds, one column per rank, one row per step; and what they come from."""
    steps = ev.steps
    if "rank" in steps.columns and steps["rank"].nunique() >= 2:
        return steps.pivot_table(index="step", columns="rank", values="duration_us", aggfunc="max") / 1e6, "trace"
    m = ev.metrics
    if ev.has_run and m is not None and "step_time_s" in m.columns and m["rank"].nunique() >= 2:
        t = m.assign(step_time_s=pd.to_numeric(m["step_time_s"], errors="coerce"))
        return t.pivot_table(index="step", columns="rank", values="step_time_s", aggfunc="max"), "metrics"
    raise MissingEvidence("needs step times of at least two ranks")


def _rank_step_times(ev: RunEvidence) -> pd.Series:
    return _rank_step_table(ev)[0].median()


def _straggler_weight(ev: RunEvidence, slow: int, severity: Severity) -> tuple[Severity, Weight]:
    """The HIGH gate on the slow rank's per-step ratio to the median of the others."""
    table, source = _rank_step_table(ev)
    table = table.dropna()
    ratios = (table[slow] / table.drop(columns=[slow]).median(axis=1)).to_numpy(float) if len(table) else None
    if source == "trace":
        return weigh_steps(ev, ev.steps[ev.steps["rank"] == slow], severity, values=ratios,
                           high=STRAGGLER_RATIO_HIGH, measure="ratio")
    return weigh(severity, values=ratios, high=STRAGGLER_RATIO_HIGH, steps=len(table), basis="logged steps",
                 measure="ratio", step_us=table[slow].to_numpy(float) * 1e6 if len(table) else None)


@rule("rank_stragglers", family="distributed", title="One rank slower than the others")
def rank_stragglers(ev: RunEvidence) -> list[Finding]:
    """Fires when a rank's median step time ≥ STRAGGLER_RATIO_MIN × the median of the other ranks."""
    times = _rank_step_times(ev).dropna()
    if len(times) < 2:
        raise MissingEvidence("needs step times of at least two ranks")
    slow = int(times.idxmax())
    others = float(np.median(times.drop(slow)))
    ratio = float(times[slow] / others) if others > 0 else 1.0
    if ratio < STRAGGLER_RATIO_MIN:
        return []
    gain = 1 - 1 / ratio
    severity, weight = _straggler_weight(ev, slow, severity_for(ratio, high=STRAGGLER_RATIO_HIGH, medium=1.25))
    return [Finding(
        rule="rank_stragglers", family="distributed",
        severity=severity, weight=weight,
        title=f"Rank {slow} is a straggler: {ratio:.2f}× the other ranks' step time",
        explanation=(
            f"Rank {slow}'s median step takes {times[slow] * 1000:.1f} ms against {others * 1000:.1f} ms on the "
            f"others ({len(times)} ranks). Every collective waits for the slowest rank, so all ranks run at its pace."
        ),
        evidence={"slow_rank": slow, "slow_step_ms": float(times[slow]) * 1000, "others_step_ms": others * 1000,
                  "ratio": ratio, "ranks": len(times)},
        fix_summary="Find what differs on that rank (data, batch shapes, host load, thermal) and balance it.",
        fix=_STRAGGLER_FIX,
        expected_gain=f"up to {format_percent(gain)} of step time on every rank",
        gain_share=gain, doc_url=DOCS["ddp"], chart="Overview › steps per rank", subject=f"rank{slow}", rank=slow,
    )]
