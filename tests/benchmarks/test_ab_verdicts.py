"""benchmarks/ab_verdicts.py without running it: targets, margin, table, JSON fields, hogs always killed."""
from __future__ import annotations

import argparse
import math

import pytest

from benchmarks import ab_verdicts as bench


def _part(name: str) -> bench.Part:
    args = argparse.Namespace(pairs=None, replicates=3, parts=[name])
    return bench.parts_for(args)[0]


def _counts(**c: int) -> dict[str, int]:
    return {v: c.get(v, 0) for v in (*bench.VERDICTS, "error")}


def test_default_sizes_are_issue_10s() -> None:
    args = argparse.Namespace(pairs=None, replicates=3, parts=list(bench.PARTS))
    sizes = {p.name: (p.pairs, p.slowdown_pct, p.replicates, p.hog) for p in bench.parts_for(args)}
    assert sizes == {"aa": (10, 0.0, 1, False), "hog": (10, 0.0, 1, True), "power": (20, 25.0, 1, False),
                     "interleaved": (10, 15.0, 3, False)}


@pytest.mark.parametrize(("name", "counts", "gates", "met"), [
    ("aa", _counts(same=9, inconclusive=1), 0, True),
    ("aa", _counts(same=9, slower=1), 1, False),            # the gate failed a pair
    ("aa", _counts(same=8, inconclusive=2), 0, False),
    ("hog", _counts(inconclusive=7, same=3), 0, True),
    ("hog", _counts(inconclusive=9, faster=1), 0, False),
    ("power", _counts(slower=18, same=2), 0, True),
    ("power", _counts(slower=17, same=3), 0, False),
    ("interleaved", _counts(slower=8, same=2), 0, True),
    ("interleaved", _counts(slower=9, error=1), 0, False),  # a pair in error never passes
])
def test_acceptance(name: str, counts: dict[str, int], gates: int, met: bool) -> None:
    assert bench.acceptance(_part(name), counts, gates, sum(counts.values())) is met


def test_summarize_prefers_the_headline() -> None:
    doc = {"headline": {"verdict": "same", "ratio": 1.02, "ci95": [0.99, 1.05], "quantity": "step_time",
                        "method": "m", "reasons": ["r"]},
           "step_time": {"verdict": "slower", "ratio": 1.5}, "gates": {"failures": []}}
    s = bench.summarize(doc, 0)
    assert s["verdict"] == "same" and s["ratio"] == 1.02 and not s["gate_failed"]
    assert s["abs_log_ratio"] == pytest.approx(math.log(1.02))
    old = bench.summarize({"step_time": {"verdict": "slower", "ratio": 0.8}, "gates": {"failures": ["x"]}}, 1)
    assert old["verdict"] == "slower" and old["gate_failed"] and old["abs_log_ratio"] == pytest.approx(-math.log(0.8))


def test_margin_is_the_95th_percentile_of_abs_log_ratio() -> None:
    logs = [0.01 * k for k in range(1, 21)]
    m = bench.margin({"pairs": [{"abs_log_ratio": x} for x in logs] + [{"abs_log_ratio": None}]})
    assert m["pairs"] == 20 and m["max_abs_log_ratio"] == pytest.approx(0.20)
    assert m["p95_abs_log_ratio"] == pytest.approx(0.1905)  # numpy's linear interpolation
    assert m["p95_as_fraction"] == pytest.approx(math.expm1(0.1905))


def test_markdown_table_has_one_row_per_part() -> None:
    part = {"pairs": [{}] * 10, "counts": _counts(same=9, inconclusive=1), "gate_failures": 0,
            "slowdown_pct": 0.0, "replicates": 1, "target": "t", "met": True}
    text = bench.markdown({"parts": {"aa": part}, "margin": bench.margin({"pairs": [{"abs_log_ratio": 0.02}]})})
    assert "| aa | 10 | 0 % | 9 | 1 | 0 | 0 | 0 | t | yes |" in text
    assert "p95 |log ratio| = 0.0200" in text


@pytest.mark.parametrize("pin", [False, True])
def test_hog_processes_are_killed_on_exit(pin: bool) -> None:
    with pytest.raises(KeyboardInterrupt), bench.Hog(1, pin=pin) as hog:
        assert all(p.poll() is None for p in hog.procs)
        raise KeyboardInterrupt
    assert hog.procs and all(p.poll() is not None for p in hog.procs)
    assert not bench._LIVE
