"""The compare delta bars keep one bar per row, even when names shorten or repeat."""
from __future__ import annotations

import pandas as pd

from app.charts.compare import make_delta_bar_figure

KERNEL = ("split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1"
          "<float, float, float, {}>(at::PackedTensorAccessor64<float, 1, at::RestrictPtrTraits>, long)")


def test_every_row_has_its_own_bar() -> None:
    table = pd.DataFrame({"name": [KERNEL.format("5ul"), KERNEL.format("2ul"), "aten::mm", "aten::mm"],
                          "delta_us": [10_000.0, -6_000.0, 3_000.0, 2_000.0]})
    bars = make_delta_bar_figure(table).data[0]
    assert len(set(bars.y)) == 4  # plotly would draw equal labels on one line
    assert any("5ul" in y for y in bars.y) and any("2ul" in y for y in bars.y)
    assert all(len(y) <= 64 for y in bars.y)
    assert sorted(bars.x) == [-6.0, 2.0, 3.0, 10.0]  # ms per step
