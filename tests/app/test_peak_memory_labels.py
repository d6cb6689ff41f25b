""""Peak memory" names its quantity, and the Overview and the Compare page agree on real CPU runs."""
from __future__ import annotations

from app.presentation.units import format_bytes, format_value
from app.workspace.sides import load_side
from profiler_agent.runformat import list_runs
from tests.app.helpers import assert_clean, open_app, show_tab
from tests.app.test_compare_page import open_compare


def _run_dir(root, name):  # noqa: ANN001, ANN202
    return next(d for d, m in list_runs(root).runs if m.name == name)


def test_cpu_sample_runs_show_the_traced_tensor_peak_everywhere(monkeypatch, sample_store) -> None:
    base = _run_dir(sample_store, "baseline")
    traced = int(load_side(base).analysis.memory_peaks["peak_allocated_bytes"].max())
    at = open_app(monkeypatch, sample_store, run=base.name, timeout=180)
    assert_clean(at)
    overview = show_tab(at, "Overview")
    tiles = {m.label: m for m in overview.metric}
    assert "Peak memory (CPU tensors)" in tiles, list(tiles)  # not RSS: the run has traces
    assert tiles["Peak memory (CPU tensors)"].value == format_bytes(traced)
    assert "tensor allocations" in tiles["Peak memory (CPU tensors)"].proto.help
    at = open_compare(monkeypatch, sample_store, "baseline,optimized")
    assert_clean(at)
    assert "Peak memory (CPU tensors)" in {m.label for m in at.metric}
    row = at.dataframe[0].value
    mem = row[row["quantity"] == "peak memory (CPU tensors)"].iloc[0]  # values formatted with units
    assert mem["baseline"] == format_value(traced, "bytes") and mem["note"] == "CPU tensors (trace_allocated:cpu)"
