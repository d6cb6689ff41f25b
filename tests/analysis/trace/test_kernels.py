"""Kernel, copy and utilisation tables on a real GPU trace."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.analysis.trace.kernels import (
    compute_device_utilization,
    compute_kernel_table,
    compute_memcpy_table,
    compute_temporal_breakdown,
)
from app.data.trace import load_trace

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "traces"
pytestmark = [pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present"),
              pytest.mark.usefixtures("module_trace_cache")]


@pytest.fixture(scope="module")
def gpu() -> object:
    return load_trace(SHARED / "gpu_before_after" / "control.json.gz")


def test_kernel_table_totals(gpu: object) -> None:
    k = compute_kernel_table([gpu])
    kern = gpu.events[gpu.events["cat"] == "kernel"]
    assert k["calls"].sum() == len(kern)
    assert k["total_us"].sum() == pytest.approx(kern["dur_us"].sum())
    assert k["share"].sum() == pytest.approx(1.0)
    assert list(k["total_us"]) == sorted(k["total_us"], reverse=True)
    assert (k["min_us"] <= k["mean_us"]).all() and (k["mean_us"] <= k["max_us"]).all()


def test_memcpy_volume(gpu: object) -> None:
    m = compute_memcpy_table([gpu])
    copies = gpu.events[gpu.events["cat"] == "gpu_memcpy"]
    assert m.loc[m["kind"] == "memcpy", "bytes"].sum() == copies["bytes"].astype(float).sum() > 0
    assert (m["gb_per_s"] >= 0).all()


def test_utilization_bounds(gpu: object) -> None:
    u = compute_device_utilization([gpu])
    assert len(u) == 6 and ((u["utilization"] > 0) & (u["utilization"] <= 1)).all()
    assert ((u["busy_us"] + u["idle_us"]) > 0).all()


def test_temporal_breakdown_matches_hta_golden(gpu: object) -> None:
    """Golden numbers from HTA 0.5.0 ``TraceAnalysis.get_temporal_breakdown`` on the same file."""
    (row,) = compute_temporal_breakdown([gpu]).itertuples()
    assert row.rank == 3
    assert row.span_us == pytest.approx(383404.0, abs=1)
    assert row.compute_us == pytest.approx(234760.0, abs=1)
    assert row.non_compute_us == pytest.approx(86525.0, abs=1)
    assert row.idle_us == pytest.approx(62119.0, abs=1)
    (whole,) = compute_temporal_breakdown([gpu], drop_last_step=False).itertuples()
    assert whole.span_us > row.span_us
