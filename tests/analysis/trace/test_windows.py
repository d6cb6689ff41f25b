"""Profiler windows and their reasons (app.analysis.trace.windows), and anomaly steps left out of typical steps."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from app.analysis.trace.step_window import typical_steps
from app.analysis.trace.windows import (
    anomaly_step_numbers,
    compute_window_table,
    split_traces,
    windows_from_profiler,
)

DETAIL = "2 training steps in a row over 2x the running median (4.3 ms); step 32 took 3.1x"
PROFILER = {"windows": [
    {"reason": "early", "rank": 0, "steps": [17, 18], "trace": "traces/w_0.pt.trace.json.gz"},
    {"reason": "anomaly", "rank": 0, "steps": [33, 34], "trace": "traces/w_1.pt.trace.json.gz", "detail": DETAIL},
    {"reason": "evaluation", "rank": 0, "steps": [45], "trace": "traces/w_2.pt.trace.json.gz", "evaluation": True},
]}


def _steps(durations: dict[int, float]) -> pd.DataFrame:
    return pd.DataFrame([{"rank": 0, "step": s, "duration_us": d} for s, d in durations.items()])


def test_windows_are_read_with_their_reasons_and_labels() -> None:
    early, anomaly, evaluation = windows_from_profiler(PROFILER)
    assert (early.reason, early.steps, early.anomalous, early.label) == ("early", (17, 18), False, "early")
    assert anomaly.anomalous and anomaly.ratio == 3.1
    assert anomaly.label == "anomaly: step 3.1× the running median"
    assert evaluation.evaluation and evaluation.trace == "traces/w_2.pt.trace.json.gz"
    assert anomaly_step_numbers((early, anomaly, evaluation)) == {33, 34}


def test_malformed_or_missing_windows_are_skipped() -> None:
    assert windows_from_profiler(None) == () and windows_from_profiler({"windows": "x"}) == ()
    bad = {"windows": [{"reason": "early", "steps": ["1"]}, {"steps": [1]}, 3,
                       {"reason": "anomaly", "steps": [5], "rank": True}]}
    [only] = windows_from_profiler(bad)
    assert only.steps == (5,) and only.rank is None and only.label == "anomaly"


def test_anomaly_steps_are_left_out_of_the_typical_steps() -> None:
    windows = windows_from_profiler(PROFILER)
    st = _steps({17: 4000.0, 18: 4100.0, 33: 13000.0, 34: 12500.0, 45: 15000.0})
    w = typical_steps(st, pd.DataFrame({"step": [45], "evaluation": [True]}), windows)
    assert sorted(w.steps["step"]) == [17, 18] and w.excluded == (33, 34, 45)
    assert "#33, #34" in w.note and "anomaly: step 3.1× the running median" in w.note and "#45" in w.note
    # Without other windows' steps the anomaly steps stay: they are all there is.
    only = _steps({33: 13000.0, 34: 12500.0})
    assert typical_steps(only, None, windows).excluded == ()


def test_the_window_table_shows_the_anomaly_windows_slowdown() -> None:
    windows = windows_from_profiler(PROFILER)
    table = compute_window_table(windows, _steps({17: 4000.0, 18: 4000.0, 33: 12000.0, 34: 12000.0, 45: 8000.0}))
    rows = table.set_index("reason")
    assert rows.loc["anomaly", "ratio_to_typical"] == 3.0  # typical: 17 and 18 (45 ran the evaluation)
    assert not rows.loc["anomaly", "typical"] and rows.loc["early", "typical"]
    assert (rows.loc["anomaly", "first_step"], rows.loc["anomaly", "last_step"]) == (33, 34)
    missing = compute_window_table(windows, _steps({17: 4000.0}))
    assert math.isnan(missing.set_index("reason").loc["anomaly", "median_step_us"])


@dataclass
class _Trace:
    path: Path


def test_traces_split_by_window_file_name() -> None:
    windows = windows_from_profiler(PROFILER)
    traces = [_Trace(Path(f"/runs/r/traces/w_{i}.pt.trace.json.gz")) for i in range(3)]
    typical, anomalous = split_traces(traces, windows)
    assert [t.path.name for t in anomalous] == ["w_1.pt.trace.json.gz"] and len(typical) == 2
    # Only anomaly traces (or none): all of them are typical.
    assert split_traces(traces[1:2], windows) == (traces[1:2], [])
    assert split_traces(traces, ()) == (traces, [])
