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
