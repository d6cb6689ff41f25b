"""Inference latency in comparisons: the agent's warm-up marks, the latency-per-sample headline and the
p50/p90/p99 rows with their intervals (app.analysis.compare.latency)."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.analysis.compare import latency as L
from app.analysis.compare.contention import ContentionCheck
from app.analysis.compare.headline import HeadlineQuantity, compute_headline
from app.analysis.compare.metrics import _metric_keys
from app.analysis.compare.options import CompareOptions
from app.analysis.compare.side import CompareSide, SideKind
from app.analysis.compare.steps import compute_step_times
from app.analysis.run.step_time import DropReason


def _calls(n: int, scale: float, *, seed: int, batch: int = 4, warmup: int = 3) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    lat = scale * 1e-3 * np.exp(rng.normal(0, 0.1, n))
    lat[:warmup] *= 20  # the first calls' one-off costs
    lines = [{"step": i, "step_time_s": float(lat[i]), "samples": batch, "inference": True,
              **({"warmup": True} if i < warmup else {})} for i in range(n)]
    return [*lines, {"step": n, "inference_calls": n, "latency_p50_s": float(np.median(lat))}]


def _side(lines: list[dict[str, Any]], label: str = "x") -> CompareSide:
    run = SimpleNamespace(metrics=pd.DataFrame(lines), manifest=SimpleNamespace(extra={}), system=None)
    return CompareSide(label=label, path=Path(label), kind=SideKind.RUN, run=run)  # type: ignore[arg-type]


def test_agent_warmup_marks_replace_auto_warmup() -> None:
    table, _ = compute_step_times(_side(_calls(40, 1.0, seed=1, warmup=7)))
    assert L.is_inference_table(table)
    assert list(table["reason"][:7]) == [DropReason.WARMUP] * 7  # auto warm-up would drop 4
    assert table["kept"][7:].all() and len(table) == 40  # the summary line is not a step


def test_training_tables_are_not_inference() -> None:
    lines = [{"step": i, "step_time_s": 0.01, "samples": 8} for i in range(30)]
    table, _ = compute_step_times(_side(lines))
    assert not L.is_inference_table(table)
    assert (table["reason"][:3] == DropReason.WARMUP).all()


def test_headline_is_latency_per_sample_for_two_inference_runs() -> None:
    a, _ = compute_step_times(_side(_calls(300, 1.0, seed=2, batch=4)))
    b, _ = compute_step_times(_side(_calls(300, 1.5, seed=3, batch=8)))
    h = compute_headline([a], [b], ContentionCheck(), CompareOptions())
    assert h.quantity == HeadlineQuantity.LATENCY_PER_SAMPLE and h.quantity == "latency_per_sample"
    assert h.ratio == pytest.approx(0.75, rel=0.05)  # 1.5 ms / 8 vs 1 ms / 4
    assert h.verdict == "faster" and "inference runs" in h.reasons[0]
    train = pd.DataFrame({"step": range(30), "step_time_s": 0.01, "samples": 4.0, "tokens": np.nan,
                          "contention": np.nan, "steal": np.nan, "kept": True, "reason": ""})
    assert compute_headline([a], [train], ContentionCheck(), CompareOptions()).quantity != "latency_per_sample"


def test_latency_rows_have_intervals_for_p50_p90_p99() -> None:
    a, _ = compute_step_times(_side(_calls(400, 1.0, seed=4)))
    b, _ = compute_step_times(_side(_calls(400, 1.3, seed=5)))
    rows = L.compute_latency_rows([a], [b], confidence=0.95, resamples=999, seed=0, threshold=0.17)
    assert [r["quantity"] for r in rows] == ["latency per sample p50", "latency per sample p90",
                                             "latency per sample p99"]
    for r in rows:
        assert r["ci_lo"] < r["ratio"] < r["ci_hi"]
        assert r["unit"] == "s" and "block_bootstrap" in r["note"]
    assert rows[0]["verdict"] == "slower"
    assert 1.2 < rows[0]["ratio"] < 1.4


def test_tail_needs_enough_calls() -> None:
    rows = L.compute_latency_rows([compute_step_times(_side(_calls(60, 1.0, seed=6)))[0]],
                                  [compute_step_times(_side(_calls(60, 1.0, seed=7)))[0]],
                                  confidence=0.95, resamples=199, seed=0, threshold=0.17)
    p99 = rows[2]
    assert math.isnan(p99["ci_lo"]) and p99["verdict"] == "n/a" and "needs" in p99["note"]
    assert math.isfinite(rows[0]["ci_lo"])


@pytest.mark.parametrize("method", L.METHODS)
def test_every_method_covers_an_aa_pair_and_sees_a_large_shift(method: str) -> None:
    rng = np.random.default_rng(8)
    a, b = np.exp(rng.normal(0, 0.2, 600)), np.exp(rng.normal(0, 0.2, 600))
    for q in L.QUANTILES:
        same = L.quantile_ratio_interval(a, b, q, method=method, resamples=499)
        assert same.lo <= 1.0 <= same.hi, (method, q, same)
        shifted = L.quantile_ratio_interval(a, 1.6 * b, q, method=method, resamples=499)
        assert shifted.lo > 1.0, (method, q, shifted)
        assert shifted.ratio == pytest.approx(1.6 * same.ratio)


def test_unknown_method_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="block_bootstrap"):
        L.quantile_ratio_interval(np.ones(10), np.ones(10), 0.5, method="jackknife")


def test_inference_marks_and_summary_are_not_compared_as_metrics() -> None:
    ma = pd.DataFrame(_calls(20, 1.0, seed=9) + [{"step": 21, "val_loss": 0.5}])
    keys = _metric_keys(ma, ma.copy())
    assert keys == ["val_loss"]
