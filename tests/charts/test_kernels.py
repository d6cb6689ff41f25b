"""Kernel share donut: every kernel keeps its own slice."""

from __future__ import annotations

import pandas as pd

from app.charts.kernels import make_kernel_share_figure


def test_kernels_with_the_same_truncated_name_stay_separate_slices() -> None:
    prefix = "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel"
    kernels = pd.DataFrame(
        {
            "name": [f"{prefix}<float, 1>", "nccl_AllReduce", f"{prefix}<float, 2>"],
            "calls": [6, 18, 6],
            "total_us": [36_180.0, 32_880.0, 7_205.0],
        }
    )
    pie = make_kernel_share_figure(kernels, n=3).data[0]
    assert len(set(pie.labels)) == 3  # plotly sums slices that share a label
    assert list(pie.values) == [36.18, 32.88, 7.205]
    assert pie.customdata[2] == f"{prefix}<float, 2>"  # hover shows the full name


def test_other_slice_is_grey_and_no_kernel_is() -> None:
    from app.charts.kernels import OTHER_COLOR

    n = 30
    kernels = pd.DataFrame(
        {"name": [f"k{i}" for i in range(n)], "calls": [1] * n, "total_us": [float(n - i) for i in range(n)]}
    )
    pie = make_kernel_share_figure(kernels, n=25).data[0]
    colors = list(pie.marker.colors)
    assert pie.labels[-1] == "other (5 kernels)" and colors[-1] == OTHER_COLOR
    assert len(colors) == len(pie.labels) == 26
    grey = {OTHER_COLOR, "#7f7f7f", "grey", "gray"}
    assert not grey & {c.lower() for c in colors[:-1]}
    assert len(set(colors[:10])) == 10  # neighbouring kernels are told apart
    no_rest = make_kernel_share_figure(kernels.head(5), n=25).data[0]
    assert OTHER_COLOR not in list(no_rest.marker.colors)
