"""`analyze`'s text table of profiler windows: a rank column when the windows are of several ranks."""
from __future__ import annotations

import pandas as pd

from app.analysis.trace.windows import WINDOW_COLUMNS
from app.cli.analyze_cmd import format_windows


def _windows(ranks: list[int | None]) -> pd.DataFrame:
    rows = [{"reason": "early", "label": "early", "detail": "", "rank": r, "trace": f"t{i}.json", "evaluation": False,
             "typical": True, "steps": 3, "first_step": 3, "last_step": 5, "median_step_us": 14_050.0,
             "ratio_to_typical": 1.14} for i, r in enumerate(ranks)]
    return pd.DataFrame(rows, columns=WINDOW_COLUMNS)


def test_windows_of_several_ranks_say_whose_they_are() -> None:
    lines = format_windows(_windows([1, 0])).splitlines()  # by rank
    assert lines[1].split()[:3] == ["RANK", "REASON", "STEPS"]
    assert [ln.split()[0] for ln in lines[3:5]] == ["0", "1"]


def test_windows_of_one_rank_have_no_rank_column() -> None:
    for ranks in ([0, 0], [None]):
        assert format_windows(_windows(ranks)).splitlines()[1].split()[0] == "REASON"
