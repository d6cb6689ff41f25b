"""Kernel charts (Vega-Lite): every kernel keeps its own slice; busy + idle make each step."""

from __future__ import annotations

import pandas as pd
import pytest

from app.charts.kernels import OTHER_COLOR, gpu_busy_chart, kernel_share_chart


def _slices(spec: dict) -> tuple[list[dict], list[str]]:
    """(the donut's rows, their colours in the rows' order)."""
    rows = spec["data"]["values"]
    scale = spec["layer"][0]["encoding"]["color"]["scale"]
    colour = dict(zip(scale["domain"], scale["range"]))
    return rows, [colour[r["label"]] for r in rows]


def test_kernels_with_the_same_truncated_name_stay_separate_slices() -> None:
    prefix = "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel"
    kernels = pd.DataFrame(
        {
            "name": [f"{prefix}<float, 1>", "nccl_AllReduce", f"{prefix}<float, 2>"],
            "calls": [6, 18, 6],
            "total_us": [36_180.0, 32_880.0, 7_205.0],
        }
    )
    rows, _ = _slices(kernel_share_chart(kernels, n=3))
    assert len({r["label"] for r in rows}) == 3  # Vega-Lite, like plotly, would merge slices sharing a label
    assert [r["ms"] for r in rows] == pytest.approx([36.18, 32.88, 7.205])
    assert rows[2]["name"] == f"{prefix}<float, 2>"  # the tooltip shows the full name
    assert [r["order"] for r in rows] == [0, 1, 2]  # largest first, not re-sorted


def test_other_slice_is_grey_and_no_kernel_is() -> None:
    n = 30
    kernels = pd.DataFrame(
        {"name": [f"k{i}" for i in range(n)], "calls": [1] * n, "total_us": [float(n - i) for i in range(n)]}
    )
    rows, colors = _slices(kernel_share_chart(kernels, n=25))
    assert rows[-1]["label"] == "other (5 kernels)" and colors[-1] == OTHER_COLOR
    assert rows[-1]["ms"] == pytest.approx((5 + 4 + 3 + 2 + 1) / 1e3)
    assert len(colors) == len(rows) == 26
    grey = {OTHER_COLOR, "#7f7f7f", "grey", "gray"}
    assert not grey & {c.lower() for c in colors[:-1]}
    assert len(set(colors[:10])) == 10  # neighbouring kernels are told apart
    _, no_rest = _slices(kernel_share_chart(kernels.head(5), n=25))
    assert OTHER_COLOR not in no_rest


def test_gpu_busy_per_step_adds_to_a_hundred() -> None:
    steps = pd.DataFrame({"rank": [0, 0, 1], "step": [3, 4, 3], "duration_us": [1000.0, 2000.0, 0.0],
                          "kernel_us": [500.0, 2500.0, 10.0], "memcpy_us": [100.0, 0.0, 0.0]})
    spec = gpu_busy_chart(steps)
    rows = {(r["step"], r["what"]): r["pct"] for r in spec["data"]["values"]}
    assert rows[("r0·3", "busy")] == pytest.approx(60.0) and rows[("r0·3", "idle")] == pytest.approx(40.0)
    assert rows[("r0·4", "busy")] == 100.0 and rows[("r0·4", "idle")] == 0.0  # capped at the step
    assert rows[("r1·3", "busy")] is None  # no duration: no bar, not a made-up share
    assert spec["encoding"]["x"]["sort"] == ["r0·3", "r0·4", "r1·3"]
    one_rank = gpu_busy_chart(steps.head(2))
    assert one_rank["encoding"]["x"]["sort"] == ["3", "4"]
