"""Distributed view on the real two-rank and NCCL traces."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.analysis.trace.distributed import compute_communication_table, compute_overlap, compute_rank_skew
from app.analysis.trace.steps import compute_steps
from app.data.trace import load_trace, load_traces

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "traces"
pytestmark = [pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present"),
              pytest.mark.usefixtures("module_trace_cache")]


def test_two_ranks_skew_and_overlap() -> None:
    traces = load_traces(SHARED / "two_ranks")
    steps = compute_steps(traces)
    assert sorted(steps["rank"].unique()) == [0, 1]
    skew = compute_rank_skew(steps)
    assert list(skew["ranks"]) == [2] * len(skew)
    for r in skew.itertuples():
        durs = steps[steps["step"] == r.step].set_index("rank")["duration_us"]
        assert r.slowest_us == durs.max() and r.slowest_rank == durs.idxmax() and r.spread_us >= 0
    ov = compute_overlap(traces, steps)
    assert (ov["overlap_us"] <= np.minimum(ov["computation_us"], ov["communication_us"]) + 1e-6).all()
    assert (ov["other_us"] >= -1e-6).all() and (ov["communication_us"] > 0).all()


def test_nccl_kernels_listed() -> None:
    comm = compute_communication_table([load_trace(SHARED / "nccl_distributed" / "nccl_data.json.gz")])
    assert len(comm) and all(n.lower().startswith("nccl") for n in comm["name"])
    assert (comm["calls"] > 0).all()
