"""Per-rank summaries and straggler changes for people: sentences and tables (presentation layer).

Takes the rows of ``app.analysis.trace.ranks.rank_summary`` and the dict of ``diff_stragglers``;
returns text and display tables. Pure: no Streamlit, no files.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from app.analysis.compare.comparison import Comparison
from app.analysis.trace.ranks import diff_stragglers, find_straggler, leading_rank, looks_late
from app.presentation.units import MISSING, format_percent, format_seconds

__all__ = ["CAUSE_WORDS", "straggler_sentence", "rank_text_rows", "RANK_TEXT_HEADERS", "rank_display_table",
           "straggler_change_sentence", "ranks_by_score", "comparison_stragglers"]

CAUSE_WORDS = {"dataloader": "data loading", "compute": "compute", "host": "host work"}
RANK_TEXT_HEADERS = ["RANK", "SCORE", "LAST AT", "LATE", "STEP", "COMPUTE", "COMMUNICATION", "OVERLAP", "DATA",
                     "HOST", "CLOCK OFFSET", "CAUSE"]


def _s(v: Any) -> str:
    return MISSING if v is None else format_seconds(float(v))


def _score(v: Any) -> str:
    return MISSING if v is None else f"{float(v):.2f}"


def _share(v: Any) -> str:
    return MISSING if v is None else format_percent(float(v))


def _offset(v: Any) -> str:
    if v is None:
        return MISSING
    return ("+" if v >= 0 else "−") + format_seconds(abs(float(v)))


def _cause(row: Mapping[str, Any]) -> str:
    if row.get("cause") is None:
        return ""
    return f"{CAUSE_WORDS.get(row['cause'], row['cause'])} +{format_seconds(row['cause_excess_s'])}"


def ranks_by_score(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows, highest straggler score first (ranks without a score last, by rank)."""
    return sorted(rows, key=lambda r: (r.get("straggler_score") is None, -(r.get("straggler_score") or 0.0),
                                       r["rank"]))


def straggler_sentence(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """One sentence naming the straggler, how often and how late it arrives and its cause; a
    sentence saying there is none when ranks were compared (and, when the leading rank looked late
    but not consistently, that more steps could tell); None with fewer than two ranks."""
    if sum(r.get("straggler_score") is not None for r in rows) < 2:
        return None
    top = find_straggler(rows)
    if top is None:
        return _no_straggler(rows)
    where = "collectives" if top["basis"] == "collective" else "step boundaries"
    text = (f"Rank {top['rank']} is the straggler (score {_score(top['straggler_score'])}): last to arrive at "
            f"{_share(top['last_share'])} of {top['sync_points']} {where}, {_s(top['late_s'])} after the median rank "
            f"on average, consistently over {top['evidence_steps']} steps (p = {_p(top['straggler_p'])})")
    if top.get("cause") is not None:
        text += (f"; it spends {_s(top['cause_excess_s'])} more per step in "
                 f"{CAUSE_WORDS.get(top['cause'], top['cause'])} than the other ranks' median")
    return text + "."


def _no_straggler(rows: Sequence[Mapping[str, Any]]) -> str:
    best = leading_rank(rows)
    assert best is not None  # two scored ranks (straggler_sentence)
    if not looks_late(best):
        return (f"No straggler: no rank is consistently the last to arrive (highest score "
                f"{_score(best['straggler_score'])}, rank {best['rank']}).")
    steps = best.get("evidence_steps") or 0
    return (f"No straggler shown: rank {best['rank']} arrived last most often (score {_score(best['straggler_score'])}, "
            f"{_s(best['late_s'])} late on average), but over {steps} step{'s' if steps != 1 else ''} identical ranks "
            f"look this late by chance (p = {_p(best.get('straggler_p'))}); profile more steps to tell "
            "(torchscope run --active 10).")


def _p(v: Any) -> str:
    if v is None:
        return MISSING
    return "< 0.001" if float(v) < 0.001 else f"{float(v):.2g}"


def rank_text_rows(rows: Sequence[Mapping[str, Any]], top: int | None = None) -> list[list[str]]:
    """Rows for RANK_TEXT_HEADERS, highest score first, at most ``top``."""
    ordered = ranks_by_score(rows)[:top] if top else ranks_by_score(rows)
    return [[str(r["rank"]), _score(r["straggler_score"]), _share(r["last_share"]), _s(r["late_s"]),
             _s(r["step_time_s"]), _s(r["compute_s"]), _s(r["communication_s"]), _s(r["overlap_s"]),
             _s(r["dataloader_s"]), _s(r["host_s"]), _offset(r["clock_offset_s"]), _cause(r)] for r in ordered]


def rank_display_table(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The per-rank table of the Run page: the score as a number (0–1), times as text, highest score first."""
    ordered = ranks_by_score(rows)
    return pd.DataFrame({
        "Rank": [r["rank"] for r in ordered],
        "Straggler score": [r["straggler_score"] for r in ordered],
        "Last at": [_share(r["last_share"]) for r in ordered],
        "Late (mean)": [_s(r["late_s"]) for r in ordered],
        "Step time": [_s(r["step_time_s"]) for r in ordered],
        "Compute": [_s(r["compute_s"]) for r in ordered],
        "Communication": [_s(r["communication_s"]) for r in ordered],
        "Overlap": [_s(r["overlap_s"]) for r in ordered],
        "Data loading": [_s(r["dataloader_s"]) for r in ordered],
        "Host": [_s(r["host_s"]) for r in ordered],
        "Clock offset": [_offset(r["clock_offset_s"]) for r in ordered],
        "Cause": [_cause(r) for r in ordered],
    })


def straggler_change_sentence(change: Mapping[str, Any], baseline: str = "baseline",
                              candidate: str = "candidate") -> str | None:
    """The change in stragglers between two runs (``diff_stragglers``), in one sentence; None
    when neither side has ranks to compare."""
    a, b, kind = change.get("baseline"), change.get("candidate"), change.get("change")
    if kind == "none":
        return None if not change.get("ranks") else "Stragglers: none on either side."

    def who(x: Mapping[str, Any]) -> str:
        cause = f", {CAUSE_WORDS.get(x['cause'], x['cause'])}" if x.get("cause") else ""
        return f"rank {x['rank']} (score {_score(x['straggler_score'])}{cause})"
    if kind == "resolved" and a is not None:
        return f"Stragglers: {who(a)} in {baseline} is no longer a straggler in {candidate}."
    if kind == "new" and b is not None:
        return f"Stragglers: {candidate} has a straggler that {baseline} did not: {who(b)}."
    if kind == "same_rank" and a is not None and b is not None:
        return f"Stragglers: the same rank straggles on both sides: {who(a)} → {who(b)}."
    if a is not None and b is not None:
        return f"Stragglers: the straggler moved from {who(a)} in {baseline} to {who(b)} in {candidate}."
    return None


def comparison_stragglers(cmp: Comparison) -> dict[str, Any] | None:
    """``diff_stragglers`` of the two sides' rank summaries, or None when neither side's traces
    hold two ranks (the ``stragglers`` part of ``diff --json``, the Compare page's sentence)."""
    # getattr: sides built by hand (tests, `ab`) may carry an analysis-like object without ranks
    rows = [getattr(side.analysis, "rank_summary", None) or [] for side in (cmp.baseline, cmp.candidate)]
    if max(len(r) for r in rows) < 2:
        return None
    return diff_stragglers(rows[0], rows[1])
