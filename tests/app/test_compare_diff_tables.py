"""The Compare page's operator and kernel tables: readable headers with units, ms for large values."""
from __future__ import annotations

import pandas as pd

from app.ui.compare_tabs import DiffKind, diff_table_display
from tests.app.test_compare_page import _tab, open_compare


def _ops(scale: float) -> pd.DataFrame:
    return pd.DataFrame({
        "name": ["aten::addmm", "aten::relu"], "module": ["0", ""],
        "baseline_calls": [2.0, 1.0], "candidate_calls": [2.0, 0.0],
        "baseline_self_us": [1500.0 * scale, 20.0 * scale], "candidate_self_us": [900.0 * scale, 0.0],
        "delta_us": [-600.0 * scale, -20.0 * scale], "change": ["both", "removed"],
    })


def test_large_op_times_are_shown_in_ms_with_labelled_headers() -> None:
    shown, config, unit = diff_table_display(_ops(1.0), DiffKind.OPS)
    assert unit == "ms"
    assert {"baseline_self_ms", "candidate_self_ms", "delta_ms"} <= set(shown.columns)
    assert not [c for c in shown.columns if c.endswith("_us")]
    assert shown["baseline_self_ms"].tolist() == [1.5, 0.02] and shown["delta_ms"].tolist() == [-0.6, -0.02]
    assert config["baseline_self_ms"]["label"] == "Baseline self (ms/step)"
    assert config["delta_ms"]["label"] == "Δ self (ms/step)"
    assert config["baseline_calls"]["label"] == "Baseline calls/step"
    assert config["module"]["label"] == "Module" and config["name"]["label"] == "Operator"
    assert list(shown["module"]) == ["0", ""] and list(shown["change"]) == ["both", "removed"]


def test_small_times_stay_in_us_and_kernels_say_time() -> None:
    shown, config, unit = diff_table_display(_ops(0.1), DiffKind.OPS)
    assert unit == "µs" and shown["baseline_self_us"].tolist() == [150.0, 2.0]
    assert config["delta_us"]["label"] == "Δ self (µs/step)"
    kernels = pd.DataFrame({"name": ["gemm"], "baseline_us": [5000.0], "candidate_us": [4000.0],
                            "delta_us": [-1000.0], "change": ["both"]})
    shown, config, unit = diff_table_display(kernels, DiffKind.KERNELS)
    assert unit == "ms" and config["delta_ms"]["label"] == "Δ time (ms/step)"
    assert config["name"]["label"] == "Kernel" and shown["candidate_ms"].tolist() == [4.0]


def test_compare_page_tables_have_units(monkeypatch, shared_data, tmp_path) -> None:
    from app.data.tbprofiler import import_traces

    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "runs"
    pair = shared_data / "traces" / "gpu_before_after"
    a = import_traces(pair / "control.json.gz", root, name="control")[0]
    b = import_traces(pair / "test.json.gz", root, name="test")[0]
    at = open_compare(monkeypatch, root, f"{a.name},{b.name}")
    assert not at.exception  # the verdict ("1.52× slower") is an st.error on purpose
    for title in ("Operators", "Kernels"):
        tab = _tab(at, title)
        table = tab.dataframe[0].value
        # ~77 vs ~117 ms steps: the big kernels and ops take ms per step, so the table is in ms
        assert "delta_ms" in table.columns and not [c for c in table.columns if c.endswith("_us")]
        assert "name" in table.columns and "change" in table.columns
        assert any("Times (ms)" in c.value for c in tab.caption)


def test_deltas_come_right_after_the_name() -> None:
    shown, _, _ = diff_table_display(_ops(1.0), DiffKind.OPS)
    assert list(shown.columns)[:3] == ["name", "module", "delta_ms"]
    assert list(shown.columns)[-1] == "change"
