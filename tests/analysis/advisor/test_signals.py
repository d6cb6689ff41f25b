"""Interval and linking helpers of the advisor checked against brute force (hypothesis) and by hand."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from app.analysis.advisor import diff_findings
from app.analysis.advisor.signals import (
    float_kind,
    idle_gaps_us,
    in_spans,
    kernel_ops,
    merged_busy_us,
    overlap_us,
)
from tests.analysis.advisor.factory import events, kernel_step
from tests.analysis.advisor.test_diff_and_registry import _f

intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(1, 50)), max_size=25)


def _grid(ivs: list[tuple[int, int]]) -> np.ndarray:
    g = np.zeros(300, dtype=bool)
    for s, d in ivs:
        g[s:s + d] = True
    return g


def _arrays(ivs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([a for a, _ in ivs], dtype=float)
    return s, s + np.array([d for _, d in ivs], dtype=float)


@settings(max_examples=200, deadline=None)
@given(intervals, intervals)
def test_union_and_overlap_match_brute_force(a, b):
    assert merged_busy_us(*_arrays(a)) == _grid(a).sum()
    assert overlap_us(*_arrays(a), *_arrays(b)) == (_grid(a) & _grid(b)).sum()
    gaps = idle_gaps_us(*_arrays(a))
    g = _grid(a)
    if g.any():
        first, last = np.flatnonzero(g)[[0, -1]]
        assert gaps.sum() == (~g[first:last + 1]).sum()


def test_in_spans():
    mask = in_spans(np.array([0.0, 5.0, 10.0, 15.0, 25.0]), np.array([20.0, 5.0]), np.array([30.0, 10.0]))
    assert mask.tolist() == [False, True, True, False, True]


def test_kernel_ops_links_kernel_to_innermost_op():
    rows = kernel_step(0.0, n_kernels=2, kernel_us=5.0, op="aten::mm", op_types='["float","float"]')
    rows.append({"name": "aten::matmul", "cat": "cpu_op", "ts_us": 0.0, "dur_us": 30.0, "pid": "1", "tid": "1"})
    k = kernel_ops(events(rows))
    assert k["op"].tolist() == ["aten::mm", "aten::mm"]
    assert float_kind(k["op_types"][0], k["name"][0]) == "float32"
    assert float_kind('["c10::BFloat16"]', "") == "half"
    assert float_kind("", "volta_h884gemm_128x64") == "half"
    assert float_kind("", "elementwise_kernel") == ""


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
       st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True), st.sets(st.sampled_from(["a", "b", "c", "d"])))
def test_diff_partitions_the_baseline(base_ids, cand_ids, checked):
    d = diff_findings([_f(i) for i in base_ids], [_f(i) for i in cand_ids], checked=checked)
    parts = [f.rule for f in d.resolved] + [r.baseline.rule for r in d.remaining] + [f.rule for f in d.unverified]
    assert sorted(parts) == sorted(base_ids)
    assert sorted(f.rule for f in d.new) == sorted(set(cand_ids) - set(base_ids))
    assert all(f.rule in checked for f in d.resolved)
