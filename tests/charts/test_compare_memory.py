"""The memory-by-category figure of the Compare page."""
from __future__ import annotations

import pandas as pd
import pytest

from app.analysis.compare.memory_categories import diff_memory_categories
from app.charts.compare_memory import make_memory_category_figure

A = pd.DataFrame({"category": ["total", "parameter", "activation"], "peak_bytes": [3 << 20, 1 << 20, 2 << 20],
                  "at_peak_bytes": [3 << 20, 1 << 20, 2 << 20]})
B = pd.DataFrame({"category": ["total", "parameter", "activation"], "peak_bytes": [6 << 20, 1 << 20, 6 << 20],
                  "at_peak_bytes": [5 << 20, 1 << 20, 4 << 20]})


def test_grouped_bars_per_category_without_total_in_a_readable_unit() -> None:
    fig = make_memory_category_figure(diff_memory_categories(A, B), "base", "cand")
    assert [t.name for t in fig.data] == ["base", "cand"] and fig.layout.barmode == "group"
    assert list(fig.data[0].x) == ["parameter", "activation"]
    assert list(fig.data[1].y) == pytest.approx([1.0, 4.0]) and fig.layout.yaxis.title.text == "MiB"
    own = make_memory_category_figure(diff_memory_categories(A, B), "base", "cand", at_peak=False)
    assert list(own.data[1].y) == pytest.approx([1.0, 6.0])


def test_missing_side_is_named_not_drawn_as_zero() -> None:
    fig = make_memory_category_figure(diff_memory_categories(None, B), "base", "cand")
    assert fig.data[0].name == "base (no memory timeline)"
    assert all(pd.isna(v) for v in fig.data[0].y)
    empty = make_memory_category_figure(diff_memory_categories(None, None), "base", "cand")
    assert len(empty.data) == 2 and len(empty.data[0].x) == 0
