"""The Run page's per-rank section (Overview tab) on a real 4-rank torchrun job with one rank slowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.helpers import assert_clean, open_app
from tests.conftest import SLOW_DDP_RANK

pytestmark = pytest.mark.slow


def test_overview_ranks_table_puts_the_slowed_rank_first(monkeypatch: pytest.MonkeyPatch,
                                                         ddp_store: tuple[Path, Path]) -> None:
    root, run_dir = ddp_store
    at = open_app(monkeypatch, root, run=run_dir.name, timeout=240)
    assert_clean(at)
    overview = next(t for t in at.tabs if t.label == "Overview")
    table = next(d.value for d in overview.dataframe if "Straggler score" in d.value.columns)
    assert table["Rank"].iloc[0] == SLOW_DDP_RANK and sorted(table["Rank"]) == [0, 1, 2, 3]
    assert table["Straggler score"].iloc[0] == table["Straggler score"].max() >= 0.5
    assert "compute" in table["Cause"].iloc[0]
    said = " ".join(w.value for w in overview.warning)
    assert f"Rank {SLOW_DDP_RANK} is the straggler" in said
