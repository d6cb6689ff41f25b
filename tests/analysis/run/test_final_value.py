"""app.analysis.run.final_value: the one "final value" rule, and Compare agrees with it."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.analysis.compare import steps as cs
from app.analysis.run.final_value import final_label, final_of_values, final_value, final_window_size


def _noisy(n: int, ranks: int = 1, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"step": s, "rank": r, "loss": float(2.0 / (1 + s) + rng.normal(0, 0.05))}
            for r in range(ranks) for s in range(n)]


@pytest.mark.parametrize("n, window", [(1, 1), (9, 1), (10, 1), (11, 2), (40, 4), (199, 20), (5000, 20)])
def test_window_is_last_tenth_between_1_and_20(n: int, window: int) -> None:
    assert final_window_size(n) == window
    values = np.arange(n, dtype=float)
    assert len(cs.final_window(values)) == window  # Compare's window, the same size


def test_median_of_last_window_not_last_value() -> None:
    records = _noisy(40)
    records[-1]["loss"] = 9.0  # one noisy last batch
    fv = final_value(records, "loss")
    assert fv is not None and fv.window == 4 and fv.count == 40
    assert fv.value == pytest.approx(float(np.median([r["loss"] for r in records[-4:]])))
    assert fv.value < 1.0
    assert fv.label == "final loss (median of last 4)"
    assert final_label("loss", 1) == "final loss (last value)"
    assert final_of_values("loss", [r["loss"] for r in records]) == fv  # the table path, values in order
    assert final_of_values("loss", []) is None


def test_rank0_step_order_and_bad_values() -> None:
    records = _noisy(30, ranks=2)
    records.reverse()  # file order must not matter: step order does
    records.append({"step": 31, "rank": 0, "loss": "nan"})
    records.append({"step": 32, "rank": 0, "loss": True})
    records.append({"step": 33, "rank": 0, "loss": None})
    records.append({"step": 34, "rank": 0, "val_loss": 1.0})
    fv = final_value(records, "loss")
    rank0 = [r["loss"] for r in sorted(_noisy(30, ranks=2), key=lambda r: (r["rank"], r["step"])) if r["rank"] == 0]
    assert fv is not None and fv.rank == 0 and fv.count == 30
    assert fv.value == pytest.approx(float(np.median(rank0[-3:])))
    r1 = final_value(records, "loss", rank=1)
    assert r1 is not None and r1.rank == 1 and r1.value != fv.value
    only1 = [r for r in records if r["rank"] == 1]
    assert final_value(only1, "loss").rank is None  # no rank 0: every rank, as Compare does
    assert final_value(records, "accuracy") is None


def test_compare_reports_the_same_final_value() -> None:
    """Compare's "final" column (median of compare_steps.final_window over rank 0) and the sweep table's
    final_loss are this number."""
    from app.analysis.compare.comparison import CompareOptions
    from app.analysis.compare.metrics import compare_metrics
    from app.data.runs import RunData, _records_to_frame
    from app.workspace.sides import CompareSide, SideKind
    from profiler_agent import runformat as rf

    def side(records: list[dict], label: str) -> CompareSide:
        frame = _records_to_frame(records, ["rank", "step"])
        manifest = rf.Manifest(id=label, name=label)
        run = RunData(path=Path(label), manifest=manifest, status=rf.RunStatus.FINISHED, metrics=frame,  # type: ignore[arg-type]
                      system=pd.DataFrame())
        return CompareSide(label=label, path=None, kind=SideKind.RUN, run=run)  # type: ignore[arg-type]

    a, b = _noisy(37, ranks=2, seed=1), _noisy(123, seed=2)
    a.reverse()
    a.append({"step": 40, "rank": 0, "val_loss": 0.5})  # a line without loss
    table = compare_metrics(side(a, "a"), side(b, "b"), CompareOptions(resamples=199)).set_index("metric")
    fa, fb = final_value(a, "loss"), final_value(b, "loss")
    assert fa is not None and fb is not None
    assert math.isclose(table.loc["loss", "baseline_final"], fa.value, rel_tol=0, abs_tol=1e-15)
    assert math.isclose(table.loc["loss", "candidate_final"], fb.value, rel_tol=0, abs_tol=1e-15)
    assert table.loc["loss", "window"] == f"{fa.window}/{fb.window}"

    from app.analysis.compare.many_runs import compute_sweep_table

    sweep, _ = compute_sweep_table([side(a, "a").run, side(b, "b").run])
    assert list(sweep["final_loss"]) == pytest.approx([fa.value, fb.value], abs=1e-15)


def test_table_path_gives_the_records_number() -> None:
    from app.data.runs import _records_to_frame

    records = _noisy(57, ranks=3, seed=3)
    records.reverse()
    records.append({"step": 60, "rank": 0, "val_loss": 0.5})
    frame = _records_to_frame(records, ["rank", "step"])
    from app.analysis.run.final_value import final_of_table

    for rank in (None, 0, 2):
        assert final_of_table(frame, "loss", rank=rank) == final_value(records, "loss", rank=rank)
    only2 = [r for r in records if r.get("rank") == 2]
    assert final_of_table(_records_to_frame(only2, ["rank", "step"]), "loss") == final_value(only2, "loss")
    assert final_of_table(frame, "lr") is None and final_of_table(frame, "missing") is None
