"""table_memo.last_table: results reused for the last table only, per argument, defaults filled in."""
from __future__ import annotations

import gc

import numpy as np
import pandas as pd
import pytest

from app.analysis.trace.categories import communication_kernel_mask
from app.analysis.trace.step_spans import find_steps
from app.analysis.trace.table_memo import last_table


def test_reused_for_the_last_table_per_argument() -> None:
    calls: list[tuple[int, bool]] = []

    @last_table
    def f(table: pd.DataFrame, flag: bool = True) -> int:
        calls.append((id(table), flag))
        return len(calls)

    a, b = pd.DataFrame({"x": [1]}), pd.DataFrame({"x": [1]})
    assert f(a) == f(a, True) == f(a, flag=True) == 1  # defaults filled in: one entry
    assert f(a, False) == 2 and f(a, flag=False) == 2
    assert f(b) == 3  # another table (equal values do not matter)
    assert f(a) == 4  # only the last table is remembered
    assert len(calls) == 4


def test_a_table_that_is_gone_is_never_matched() -> None:
    @last_table
    def f(table: pd.DataFrame) -> int:
        return int(table["x"].iloc[0])

    assert f(pd.DataFrame({"x": [1]})) == 1
    gc.collect()
    assert f(pd.DataFrame({"x": [2]})) == 2  # may reuse the first one's address


def test_shared_arrays_are_read_only() -> None:
    ev = pd.DataFrame({"name": pd.Categorical(["ProfilerStep#1", "ncclKernel_AllReduce"]),
                       "cat": pd.Categorical(["user_annotation", "kernel"]), "ts_us": [0.0, 1.0],
                       "dur_us": [10.0, 2.0], "correlation": pd.array([None, 7], dtype="Int64"),
                       "external_id": pd.array([None, None], dtype="Int64")})
    mask = communication_kernel_mask(ev)
    assert mask is communication_kernel_mask(ev, by_name=True) and mask.tolist() == [False, True]
    assert communication_kernel_mask(ev, False).tolist() == [False, False]
    spans = find_steps(ev)
    assert spans is find_steps(ev)
    for a in (mask, spans.start):
        with pytest.raises(ValueError):
            a[...] = np.zeros_like(a)
