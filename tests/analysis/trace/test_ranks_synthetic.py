"""Synthetic DDP rank sets (benchmarks/gen_ranks.py): the slowed rank is found, whatever the clocks say."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.analysis.trace.ranks import find_straggler, rank_summary, summaries_from_tables, summarize_rank
from app.analysis.trace.summary import analyze_traces
from app.data.trace import load_traces
from benchmarks.gen_ranks import write_rank_set

pytestmark = pytest.mark.usefixtures("module_trace_cache")


@pytest.fixture(scope="module")
def traces64(tmp_path_factory: pytest.TempPathFactory) -> list:
    out = tmp_path_factory.mktemp("ranks64")
    paths = write_rank_set(out, 64, slow_rank=41, steps=3, kernels_per_step=4, seed=3)
    assert [p.name for p in paths[:2]] == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    return load_traces(out)


@pytest.mark.slow
def test_64_ranks_find_the_slowed_rank(traces64: list) -> None:
    """Each rank summarised on its own, as a parallel-ingest worker does, then compared."""
    summaries = {t.rank: summarize_rank(t) for t in traces64}
    rows = rank_summary(summaries)
    assert [r["rank"] for r in rows] == list(range(64))
    top = find_straggler(rows)
    assert top is not None and top["rank"] == 41 and top["cause"] == "compute"
    assert top["straggler_score"] > 0.9 and top["last_share"] == 1.0
    assert max(r["straggler_score"] for r in rows if r["rank"] != 41) < 0.1
    # As in real DDP every rank's step takes the same time: the others wait in the collectives.
    times = [r["step_time_s"] for r in rows]
    assert max(times) - min(times) < 1e-3 * max(times)
    assert top["communication_s"] < min(r["communication_s"] for r in rows if r["rank"] != 41)
    # The clocks disagree by more than the delay, so raw timestamps could not have found it.
    starts = [s.steps[0].start_us for s in summaries.values()]
    assert max(starts) - min(starts) > 10 * (top["late_s"] * 1e6)
    offsets = [r["clock_offset_s"] for r in rows]
    assert max(offsets) - min(offsets) > 0.02


def test_a_worker_summary_is_the_same_as_the_set_analysis(tmp_path: Path) -> None:
    """What parallel ingest sends back per rank (summarize_rank) gives what analyze reports."""
    write_rank_set(tmp_path, 3, slow_rank=1, steps=2, kernels_per_step=3, seed=2)
    traces = load_traces(tmp_path)
    analysis = analyze_traces(traces)
    whole = summaries_from_tables(analysis.steps, analysis.overlap, analysis.collectives)
    assert {t.rank: summarize_rank(t) for t in traces} == whole
    assert rank_summary(whole) == analysis.rank_summary
    assert find_straggler(analysis.rank_summary)["rank"] == 1


@pytest.mark.parametrize("cause", ["dataloader", "host"])
def test_the_cause_of_a_small_set(tmp_path: Path, cause: str) -> None:
    write_rank_set(tmp_path, 3, slow_rank=0, cause=cause, steps=2, kernels_per_step=3, seed=1)
    top = find_straggler(rank_summary({t.rank: summarize_rank(t) for t in load_traces(tmp_path)}))
    assert top is not None and top["rank"] == 0 and top["cause"] == cause


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="slow_rank 4"):
        write_rank_set(tmp_path, 4, slow_rank=4)
    with pytest.raises(ValueError, match="cause 'disk'"):
        write_rank_set(tmp_path, 4, slow_rank=0, cause="disk")


def test_diff_names_the_change_in_stragglers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from app.cli import main

    a, b = tmp_path / "a", tmp_path / "b"
    write_rank_set(a, 4, slow_rank=1, steps=3, kernels_per_step=3, seed=4)
    write_rank_set(b, 4, slow_rank=3, steps=3, kernels_per_step=3, seed=5)
    main(["diff", str(a), str(b), "--json", "--no-advice", "--resamples", "1000"])
    change = json.loads(capsys.readouterr().out)["stragglers"]
    assert change["change"] == "moved"
    assert change["baseline"]["rank"] == 1 and change["candidate"]["rank"] == 3
    assert change["candidate"]["cause"] == "compute"
    assert {r["rank"] for r in change["ranks"][:2]} == {1, 3}
