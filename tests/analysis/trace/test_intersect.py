"""distributed._intersect (vectorised) against the two-pointer merge it replaced."""
from __future__ import annotations

import numpy as np
import pytest

from app.analysis.trace.distributed import _intersect
from app.analysis.trace.intervals import merge_intervals


def _two_pointer(a_s, a_e, b_s, b_e):  # type: ignore[no-untyped-def]
    out_s, out_e = [], []
    i = j = 0
    while i < len(a_s) and j < len(b_s):
        lo, hi = max(a_s[i], b_s[j]), min(a_e[i], b_e[j])
        if lo < hi:
            out_s.append(lo)
            out_e.append(hi)
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return np.asarray(out_s, float), np.asarray(out_e, float)


@pytest.mark.parametrize("seed", range(12))
def test_intersection_is_the_two_pointer_merge(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lists = []
    for _ in range(2):
        n = int(rng.integers(0, 60))
        s = np.round(rng.uniform(0, 200, n), int(rng.integers(0, 2)))  # ties and touching ends too
        e = s + np.round(rng.choice([0.0, 0.5, 3.0, 20.0], n), 1)
        lists.append(merge_intervals(s, e))
    (a_s, a_e), (b_s, b_e) = lists
    got, want = _intersect(a_s, a_e, b_s, b_e), _two_pointer(a_s, a_e, b_s, b_e)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
