"""Cross-rank analysis on hand-made summaries: straggler score, clock offsets, cause, changes between runs."""
from __future__ import annotations

import pickle

import pytest

from app.analysis.trace.ranks import (
    RANK_SUMMARY_KEYS,
    CollectiveArrival,
    RankStepSummary,
    StepTimes,
    _point_to_point,
    diff_stragglers,
    find_straggler,
    rank_summary,
    summarize_rank,
)
from app.data.trace import load_traces
from app.presentation.ranks_text import rank_display_table, straggler_change_sentence, straggler_sentence

STEP_US = 10_000.0


def _ranks(n: int, *, slow: int | None = None, delay_us: float = 3_000.0, cause: str = "compute",
           offsets: dict[int, float] | None = None, steps: int = 4, collectives: bool = True,
           jitter_us: float = 20.0) -> dict[int, RankStepSummary]:
    """DDP-like summaries: every step ends at the same true time; the slowed rank's extra time is in
    ``cause`` so it enters the one all-reduce of each step last; rank k's clock is off by offsets[k]."""
    offsets = offsets or {}
    out = {}
    for k in range(n):
        off = offsets.get(k, 0.0)
        extra = delay_us if k == slow else 0.0
        rows, colls = [], []
        for s in range(steps):
            start = s * STEP_US
            noise = jitter_us * (((k * 7 + s * 3) % 5) - 2) / 2  # deterministic, small
            arrive = start + 6_000.0 + noise + extra  # compute before the all-reduce
            end = start + 6_000.0 + delay_us + 500.0  # the last rank arrives, then the transfer
            compute = 5_000.0 + noise + (extra if cause == "compute" else 0.0)
            rows.append(StepTimes(step=s, start_us=start + off, end_us=start + STEP_US + off, compute_us=compute,
                                  communication_us=end - arrive, overlap_us=100.0,
                                  dataloader_us=500.0 + (extra if cause == "dataloader" else 0.0),
                                  host_us=300.0 + (extra if cause == "host" else 0.0), other_us=0.0))
            if collectives:
                colls.append(CollectiveArrival("ncclKernel_AllReduce", s, 0, arrive + off, end + off))
        out[k] = RankStepSummary(rank=k, steps=tuple(rows), collectives=tuple(colls), device=True)
    return out


def _by_rank(rows: list[dict]) -> dict[int, dict]:
    return {r["rank"]: r for r in rows}


def test_slowed_rank_has_the_top_score_despite_clock_offsets() -> None:
    # Offsets of ±40 ms dwarf the 3 ms delay: raw timestamps would name rank 5 (the latest clock).
    offsets = {k: (k - 3) * 10_000.0 + (5_000.0 if k == 5 else 0.0) for k in range(8)}
    rows = rank_summary(_ranks(8, slow=2, offsets=offsets))
    assert [list(r) for r in rows] == [RANK_SUMMARY_KEYS] * 8
    by = _by_rank(rows)
    assert by[2]["straggler_score"] == pytest.approx(1.0)
    assert max(r["straggler_score"] for k, r in by.items() if k != 2) < 0.05
    assert by[2]["last_share"] == 1.0 and by[2]["sync_points"] == 4 and by[2]["basis"] == "collective"
    assert by[2]["late_s"] == pytest.approx(3e-3, rel=0.05)
    assert by[2]["cause"] == "compute" and by[2]["cause_excess_s"] == pytest.approx(3e-3, rel=0.05)
    assert all(r["cause"] is None for k, r in by.items() if k != 2)
    # The offsets come back (relative to the median rank) from the simultaneous collective ends.
    med = sorted(offsets.values())[3:5]
    centre = sum(med) / 2
    for k, r in by.items():
        assert r["clock_offset_s"] == pytest.approx((offsets[k] - centre) / 1e6, abs=1e-6)
    assert by[0]["step_time_s"] == pytest.approx(STEP_US / 1e6)
    assert find_straggler(rows)["rank"] == 2


@pytest.mark.parametrize("cause", ["dataloader", "host", "compute"])
def test_cause_is_named_from_the_breakdown(cause: str) -> None:
    top = find_straggler(rank_summary(_ranks(4, slow=1, cause=cause)))
    assert top is not None and top["rank"] == 1 and top["cause"] == cause


def test_balanced_ranks_name_no_straggler() -> None:
    rows = rank_summary(_ranks(6, delay_us=0.0))
    assert all(r["straggler_score"] < 0.5 for r in rows)
    assert find_straggler(rows) is None
    assert straggler_sentence(rows).startswith("No straggler")


def test_without_collectives_the_step_boundaries_are_used() -> None:
    rows = rank_summary(_ranks(4, slow=3, collectives=False))
    by = _by_rank(rows)
    assert {r["basis"] for r in rows} == {"step"}
    assert by[3]["straggler_score"] == pytest.approx(1.0) and find_straggler(rows)["rank"] == 3
    assert by[3]["clock_offset_s"] is None


def test_one_rank_has_no_score() -> None:
    rows = rank_summary(_ranks(1))
    assert len(rows) == 1 and rows[0]["straggler_score"] is None and rows[0]["sync_points"] == 0
    assert find_straggler(rows) is None and straggler_sentence(rows) is None


def test_collectives_seen_by_one_rank_only_do_not_count() -> None:
    per = _ranks(3, slow=0)
    extra = CollectiveArrival("nccl:broadcast", 0, 0, 1.0, 2.0)
    per[1] = RankStepSummary(rank=1, steps=per[1].steps, collectives=(*per[1].collectives, extra), device=True)
    assert _by_rank(rank_summary(per))[1]["sync_points"] == 4


def test_summary_is_small_and_picklable() -> None:
    s = _ranks(2)[0]
    assert pickle.loads(pickle.dumps(s)) == s
    assert s.steps[0].duration_us == STEP_US


def test_straggler_changes_between_runs() -> None:
    slow2, slow5, none = (rank_summary(_ranks(8, slow=2)), rank_summary(_ranks(8, slow=5)),
                          rank_summary(_ranks(8, delay_us=0.0)))
    moved = diff_stragglers(slow2, slow5)
    assert moved["change"] == "moved" and moved["baseline"]["rank"] == 2 and moved["candidate"]["rank"] == 5
    assert {moved["ranks"][0]["rank"], moved["ranks"][1]["rank"]} == {2, 5}
    assert sorted(round(d["delta"]) for d in moved["ranks"][:2]) == [-1, 1]
    assert diff_stragglers(slow2, none)["change"] == "resolved"
    assert diff_stragglers(none, slow5)["change"] == "new"
    assert diff_stragglers(slow2, slow2)["change"] == "same_rank"
    assert diff_stragglers(none, none)["change"] == "none"
    text = straggler_change_sentence(moved, "base", "cand")
    assert "moved from rank 2" in text and "rank 5" in text and "cand" in text


def test_display_table_puts_the_straggler_first() -> None:
    rows = rank_summary(_ranks(4, slow=3))
    table = rank_display_table(rows)
    assert table["Rank"].iloc[0] == 3 and table["Straggler score"].iloc[0] == pytest.approx(1.0)
    assert "compute" in table["Cause"].iloc[0]
    assert "Rank 3 is the straggler" in straggler_sentence(rows)


@pytest.mark.parametrize(("name", "p2p"), [
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", True),
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", True),
    ("ncclKernel_Send_RING_SIMPLE", True),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", False),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", False),
    ("rcclKernel_Recv", True),
])
def test_point_to_point_kernels_are_told_apart(name: str, p2p: bool) -> None:
    assert _point_to_point(name) is p2p


def test_send_recv_kernels_are_no_sync_points(shared_data) -> None:  # noqa: ANN001
    # A two-stage pipeline's ranks: their only communication kernels are SendRecv, whose exits were
    # 21 ms apart (median) after the clock offset, as far apart as the entries: no sync point. The
    # ranks are compared at the step boundaries instead.
    per = {t.rank: summarize_rank(t) for t in load_traces(shared_data / "traces" / "two_ranks")}
    assert all(s is not None and not s.collectives for s in per.values())
    rows = rank_summary({r: s for r, s in per.items() if s is not None})
    assert [r["basis"] for r in rows] == ["step", "step"]
