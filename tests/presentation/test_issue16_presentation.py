"""Issue 16's clean numbers: units, human metric names, the HTML report's columns, model table and size."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from app.analysis.curves.smoothing import SHORT_SERIES_POINTS, smooth_by_default
from app.cli import main
from app.presentation.names import display_table, metric_display, metric_label
from app.presentation.report_html import column_cell, column_title, module_display_table
from app.presentation.units import format_count, format_flops, format_shape

GOLDEN_RUNS = Path(__file__).resolve().parents[1] / "data" / "golden" / "runs"


def test_flops_shapes_and_counts_for_people() -> None:
    assert format_flops(134217728) == "134.2 MFLOP"
    assert format_flops(2.5e12) == "2.50 TFLOP"
    assert format_flops(None) == "–"
    assert format_shape("[[32, 3, 224, 224], [64, 3, 7, 7], [], []]") == "32×3×224×224, 64×3×7×7"
    assert format_shape("32x64") == "32×64" and format_shape("") == ""
    assert format_count(1.3e9) == "1.3 B" and format_count(1234) == "1,234"


def test_agent_keys_have_human_names_and_one_unit() -> None:
    assert metric_label("lr_1") == "learning rate (group 1)"
    assert metric_label("data_time_s") == "data loading time (ms)"
    d = metric_display("step_time_s")
    assert d.label == "step time (ms)" and d.scale == 1e3
    assert metric_display("gpu_allocated_bytes").unit == "MiB"
    assert metric_label("my_metric") == "my_metric"  # the user's keys as logged
    table, _names = display_table(pd.DataFrame({"median_step_time_s": [0.05], "peak_memory_bytes": [2 << 20],
                                               "config.lr": [0.1]}),
                                 ["median_step_time_s", "peak_memory_bytes", "config.lr"])
    assert list(table.columns) == ["median step time (ms)", "peak memory (MiB)", "lr"]
    assert table.iloc[0].tolist() == pytest.approx([50.0, 2.0, 0.1])


def test_smoothing_is_off_for_the_learning_rate_and_short_series() -> None:
    assert smooth_by_default("loss", SHORT_SERIES_POINTS)
    assert not smooth_by_default("loss", SHORT_SERIES_POINTS - 1)
    for key in ("lr", "lr_1", "learning_rate", "optim/lr"):
        assert not smooth_by_default(key, 10_000), key


def test_report_columns_say_their_unit() -> None:
    assert column_title("baseline_self_us") == "baseline self (ms)"
    assert column_title("delta_us") == "Δ (ms)"
    assert column_cell("baseline_self_us", 90650.0) == "90.650"
    assert column_title("baseline_flops") == "baseline FLOPs" and column_cell("baseline_flops", 2.4e9) == "2.40 GFLOP"


def test_a_batch_size_change_is_one_row_of_the_model_table() -> None:
    rows = [{"path": f"layer{i}", "change": "shape", "baseline_shape": "32x64", "candidate_shape": "64x64"}
            for i in range(12)] + [{"path": "head", "change": "params", "baseline_shape": "", "candidate_shape": ""}]
    out = module_display_table(pd.DataFrame(rows))
    assert len(out) == 2
    (collapsed,) = out[out["path"] == "12 modules"]["change"]
    assert "batch size" in collapsed and "32×64 → 64×64" in collapsed


@pytest.mark.slow  # a real diff of the golden runs and their report (~10 s)
def test_html_report_without_plotly_is_small(tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    shutil.copytree(GOLDEN_RUNS, root)
    out = tmp_path / "cmp.html"
    assert main(["report", "baseline", "wide", "--root", str(root), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    scripts = sorted((m.end() - m.start(), m.start(), m.end()) for m in re.finditer(r"<script[^>]*>.*?</script>", page, re.S))
    _, start, end = scripts[-1]  # the one inlined plotly.js
    rest = page[:start] + page[end:]
    assert len(rest.encode()) < 1_000_000
    headers = re.findall(r"<th>([^<]*)</th>", rest)
    assert headers and not [h for h in headers if re.search(r"_(us|bytes|s)$", h)], headers
