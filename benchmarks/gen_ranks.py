"""Generate synthetic multi-rank DDP traces with one slowed rank (benchmark and test tool).

    python -m benchmarks.gen_ranks --ranks 256 --slow-rank 17 --out /tmp/ranks256

Writes one Kineto/Chrome trace per rank (``rank<k>.pt.trace.json``, with ``distributedInfo``) of a
data-parallel training loop: per step, data loading, forward kernels, backward kernels with
gradient buckets all-reduced on a communication stream while backward goes on (overlap), then
the optimizer once the last bucket is reduced. Kernel names, their relative durations and the
collective names come from a real distributed GPU trace (default: the shared two-rank trace,
``../shared/data/traces/two_ranks/sampled_rank-0.json.gz``; without it, built-in names).

As in real DDP, a collective instance ends at the same instant on every rank: when the last rank
has arrived plus the transfer time. The slowed rank spends ``delay_frac`` × the base step time
more in ``cause`` (``compute``, ``dataloader`` or ``host``), so it arrives last at every bucket;
the other ranks wait in the collective kernels, and every rank's step takes the same wall time.
Each rank's clock has its own offset (``clock_skew_us``), so timestamps alone never say who was
late: only the collectives, aligned per instance, do.

``steps`` and ``kernels_per_step`` are the size knobs: the defaults make ~80 KB per rank, so a
64-rank set builds and analyses in a few seconds; benchmarks raise them.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["write_rank_set", "rank_file_name", "CAUSES", "DEFAULT_SOURCE"]

DEFAULT_SOURCE = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces" / "two_ranks"
                  / "sampled_rank-0.json.gz")
CAUSES = ("compute", "dataloader", "host")
_ALLREDUCE_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
_FALLBACK_KERNELS = [("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >", 1.0),
                     ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>", 6.0),
                     ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >", 2.0)]
_FORWARD_OPS = ("aten::linear", "aten::addmm", "aten::relu", "aten::mul", "aten::sum")
_BACKWARD_OPS = ("autograd::engine::evaluate_function: AddmmBackward0", "autograd::engine::evaluate_function: MmBackward0")
_HOST_PID0, _GPU_PID, _COMPUTE_STREAM, _COMM_STREAM = 4000, 0, 7, 20
# Share of the base step: data loading, forward, backward, optimizer, one bucket's transfer.
_LOAD, _FWD, _BWD, _OPT, _XFER = 0.10, 0.30, 0.45, 0.08, 0.03


def rank_file_name(rank: int) -> str:
    """The file name of ``rank``'s trace (the trace loader reads the rank from it and from distributedInfo)."""
    return f"rank{rank}.pt.trace.json"


def _source_kernels(source: Path | None) -> list[tuple[str, float]]:
    """(name, duration µs) of the compute kernels of the source's first step, in order."""
    path = DEFAULT_SOURCE if source is None else source
    if not path.is_file():
        if source is not None:
            raise FileNotFoundError(f"{path}: no such trace")
        return list(_FALLBACK_KERNELS)
    raw = path.read_bytes()
    events = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["traceEvents"]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    lo, hi = (steps[0]["ts"], steps[0]["ts"] + steps[0]["dur"]) if steps else (float("-inf"), float("inf"))
    out = [(str(e["name"]), float(e.get("dur", 0.0))) for e in sorted(events, key=lambda e: e.get("ts", 0))
           if e.get("cat") == "kernel" and lo <= e.get("ts", lo - 1) < hi and e.get("dur", 0) > 0
           and not str(e["name"]).lower().startswith(("nccl", "rccl"))]
    return out or list(_FALLBACK_KERNELS)


@dataclass(frozen=True)
class _Plan:
    """The shape of one step, shared by all ranks (µs)."""

    step_us: float
    kernels: list[tuple[str, float]]  # name, share of a phase's time
    kernels_per_step: int
    buckets: int


class _Rank:
    """The events of one rank, in its own clock (true time + offset)."""

    def __init__(self, rank: int, offset_us: float) -> None:
        self.rank, self.offset, self.pid = rank, offset_us, _HOST_PID0 + rank
        self.events: list[dict[str, object]] = []
        self.corr = rank * 10_000_000

    def x(self, cat: str, name: str, ts: float, dur: float, tid: int, pid: int | None = None,
          args: dict[str, object] | None = None) -> None:
        e: dict[str, object] = {"ph": "X", "cat": cat, "name": name, "pid": self.pid if pid is None else pid,
                                "tid": tid, "ts": round(ts + self.offset, 3), "dur": round(dur, 3)}
        if args:
            e["args"] = args
        self.events.append(e)

    def launch(self, op: str, kernel: str, t: float, dur: float, stream: int = _COMPUTE_STREAM,
               k_start: float | None = None, k_end: float | None = None) -> None:
        """A host op at ``t`` that launches ``kernel``; the kernel runs [k_start, k_end] (default: under the op)."""
        self.corr += 1
        ids = {"External id": self.corr, "correlation": self.corr}
        self.x("cpu_op", op, t, dur, self.pid, args={"External id": self.corr})
        self.x("cuda_runtime", "cudaLaunchKernel", t + 0.05 * dur, min(5.0, 0.2 * dur), self.pid, args=ids)
        ks = t + 0.1 * dur if k_start is None else k_start
        ke = t + dur if k_end is None else k_end
        self.x("kernel", kernel, ks, ke - ks, stream, pid=_GPU_PID, args=ids | {"stream": stream, "device": 0})


def _phase(r: _Rank, plan: _Plan, t: float, total: float, ops: tuple[str, ...], n: int, first: int) -> float:
    """``n`` kernels (from the source's, cyclically) filling ``total`` µs from ``t``; returns the end."""
    picked = [plan.kernels[(first + i) % len(plan.kernels)] for i in range(n)]
    weight = sum(w for _, w in picked) or 1.0
    for i, (name, w) in enumerate(picked):
        d = total * w / weight
        r.launch(ops[i % len(ops)], name, t, d)
        t += d
    return t


def _step_times(plan: _Plan, n_ranks: int, slow_rank: int | None, delay_us: float, cause: str,
                rng: random.Random) -> list[dict[str, float]]:
    """Per rank, this step's phase lengths (µs) with a little noise and the slowed rank's delay."""
    out = []
    for k in range(n_ranks):
        noise = [1.0 + rng.uniform(-0.01, 0.01) for _ in range(3)]
        d = {"load": _LOAD * plan.step_us * noise[0], "host": 0.0,
             "fwd": _FWD * plan.step_us * noise[1], "bwd": _BWD * plan.step_us * noise[2]}
        if k == slow_rank:
            if cause == "compute":
                d["fwd"] += delay_us * _FWD / (_FWD + _BWD)
                d["bwd"] += delay_us * _BWD / (_FWD + _BWD)
            elif cause == "dataloader":
                d["load"] += delay_us
            else:
                d["host"] += delay_us
        out.append(d)
    return out


def _write_step(ranks: list[_Rank], plan: _Plan, step: int, start: float, times: list[dict[str, float]]) -> float:
    """Every rank's events of one step from the common ``start``; returns the common step end."""
    kps = plan.kernels_per_step
    n_fwd, n_bwd, n_opt = max(1, kps * 4 // 10), max(plan.buckets, kps * 5 // 10), max(1, kps // 10)
    arrivals: list[list[float]] = []
    bwd_cuts: list[list[float]] = []
    for r, d in zip(ranks, times):
        t = start + d["load"]
        r.x("cpu_op", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", start, d["load"], r.pid)
        if d["host"]:
            r.x("cpu_op", "aten::item", t, d["host"], r.pid)  # host work with no device work behind it
            t += d["host"]
        t = _phase(r, plan, t, d["fwd"], _FORWARD_OPS, n_fwd, 0)
        cuts = [t + d["bwd"] * (j + 1) / plan.buckets for j in range(plan.buckets)]
        bwd_cuts.append([t, *cuts])
        arrivals.append(cuts)
    # A bucket's all-reduce ends when the last rank has arrived (and the previous bucket is done) + transfer.
    ends: list[float] = []
    for j in range(plan.buckets):
        prev = ends[-1] if ends else start
        ends.append(max(max(a[j] for a in arrivals), prev) + _XFER * plan.step_us)
    opt_us = _OPT * plan.step_us
    for r, cuts, arr in zip(ranks, bwd_cuts, arrivals):
        per_bucket = max(1, n_bwd // plan.buckets)
        for j in range(plan.buckets):
            _phase(r, plan, cuts[j], cuts[j + 1] - cuts[j], _BACKWARD_OPS, per_bucket, n_fwd + j * per_bucket)
            k_start = max(arr[j], ends[j - 1] if j else start)
            r.launch("nccl:all_reduce", _ALLREDUCE_KERNEL, arr[j], 10.0, stream=_COMM_STREAM,
                     k_start=k_start, k_end=ends[j])
        r.x("user_annotation", "Optimizer.step#SGD.step", ends[-1], opt_us, r.pid)
        _phase(r, plan, ends[-1], opt_us, ("aten::add_",), n_opt, n_fwd + n_bwd)
        r.x("user_annotation", f"ProfilerStep#{step}", start, ends[-1] + opt_us - start, r.pid)
    return ends[-1] + opt_us


def _header(rank: int, n_ranks: int) -> dict[str, object]:
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": n_ranks},
            "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}]}


def _dump(path: Path, head: dict[str, object], events: list[dict[str, object]]) -> None:
    def chunks() -> Iterator[str]:
        yield json.dumps(head)[:-1] + ', "traceEvents": [\n'
        yield ",\n".join(json.dumps(e, separators=(",", ":")) for e in events)
        yield "\n]}\n"
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.writelines(chunks())
    tmp.replace(path)


def write_rank_set(out_dir: Path, n_ranks: int, *, slow_rank: int | None, delay_frac: float = 0.3, steps: int = 4,
                   seed: int = 0, source: Path | None = None, cause: str = "compute", kernels_per_step: int = 10,
                   buckets: int = 2, step_us: float = 10_000.0, clock_skew_us: float = 50_000.0) -> list[Path]:
    """Write one trace per rank into ``out_dir`` and return their paths, by rank.

    ``slow_rank`` (None: no straggler) spends ``delay_frac`` × ``step_us`` more per step in
    ``cause`` (one of CAUSES). ``clock_skew_us`` bounds each rank's clock offset. Raises
    ValueError for a bad argument, FileNotFoundError for a ``source`` that is not there.
    """
    if n_ranks < 1 or steps < 1 or buckets < 1 or kernels_per_step < 1:
        raise ValueError("n_ranks, steps, buckets and kernels_per_step must be at least 1")
    if slow_rank is not None and not 0 <= slow_rank < n_ranks:
        raise ValueError(f"slow_rank {slow_rank} is not a rank of 0..{n_ranks - 1}")
    if cause not in CAUSES:
        raise ValueError(f"cause {cause!r}: expected one of {', '.join(CAUSES)}")
    rng = random.Random(seed)
    src = _source_kernels(source)
    total = sum(d for _, d in src) or 1.0
    plan = _Plan(step_us=step_us, kernels=[(n, d / total) for n, d in src], kernels_per_step=kernels_per_step,
                 buckets=buckets)
    ranks = [_Rank(k, rng.uniform(-clock_skew_us, clock_skew_us)) for k in range(n_ranks)]
    t = 1_700_000_000_000_000.0  # an epoch-like start in µs, as Kineto writes
    for s in range(steps):
        times = _step_times(plan, n_ranks, slow_rank, delay_frac * step_us, cause, rng)
        t = _write_step(ranks, plan, 100 + s, t, times) + 50.0
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in ranks:
        path = out_dir / rank_file_name(r.rank)
        _dump(path, _header(r.rank, n_ranks), sorted(r.events, key=lambda e: (e["ts"], e["pid"] != r.pid)))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--slow-rank", type=int, default=None)
    p.add_argument("--delay-frac", type=float, default=0.3)
    p.add_argument("--cause", choices=CAUSES, default="compute")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--kernels-per-step", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--source", type=Path, default=None)
    a = p.parse_args(argv)
    paths = write_rank_set(a.out, a.ranks, slow_rank=a.slow_rank, delay_frac=a.delay_frac, steps=a.steps, seed=a.seed,
                           source=a.source, cause=a.cause, kernels_per_step=a.kernels_per_step)
    size = sum(p.stat().st_size for p in paths)
    print(f"wrote {len(paths)} traces ({size / 1e6:.1f} MB) to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
