"""What the pages leave for later is the same as computed at once (issue 16): the Compare page's
comparison without its op and kernel deltas, completed by ``with_op_tables``, equals
``diff_sides``; the Run page's background analysis fills the cache the trace tabs read."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from app.analysis.compare.comparison import diff_sides, with_op_tables
from app.presentation.compare_json import comparison_to_json
from app.workspace.sides import load_side
from profiler_agent.runformat import layout
from tests.conftest import PROJECT_ROOT

TRACES = PROJECT_ROOT / "tests" / "data" / "traces" / "cpu_torch213"


def _traced(make_run: Any, name: str, trace: str) -> Path:
    run = make_run(name)
    (run / layout.TRACES_DIR).mkdir(exist_ok=True)
    shutil.copy(TRACES / trace, run / layout.TRACES_DIR / f"host_1_rank0.170000000000000000{len(name)}.pt.trace.json.gz")
    return run


def test_a_comparison_completed_later_is_the_whole_comparison(make_run: Any) -> None:
    traces = sorted(p.name for p in TRACES.glob("*.pt.trace.json.gz"))
    a = load_side(_traced(make_run, "base", traces[0]))
    b = load_side(_traced(make_run, "candidate", traces[-1]))
    whole = diff_sides(a, b)
    light = diff_sides(a, b, op_tables=False)
    assert light.ops.empty and light.kernels.empty and len(whole.ops)  # the part left out is not nothing
    later = with_op_tables(light)
    for name in ("ops", "kernels", "breakdown", "verdicts"):
        pd.testing.assert_frame_equal(getattr(later, name), getattr(whole, name), check_exact=True)
    assert comparison_to_json(later, top=None) == comparison_to_json(whole, top=None)  # all `diff --json` says
    assert later.baseline is a and later.candidate is b
