"""The Compare page's headline: the quantity judged, its ratio, interval, verdict, method, replicates,
reasons, and the two step sets (UI layer).

It shows the comparison's ``headline`` (``app.analysis.compare.headline.Headline``), its
``step_sets`` and its ``sign_note``, as the analysis computed them.
"""
from __future__ import annotations

import math
import re

import streamlit as st

from app.analysis.compare.comparison import Comparison
from app.analysis.compare.headline import Headline, HeadlineVerdict
from app.presentation.units import format_value

__all__ = ["headline_sentence", "step_set_lines", "render_headline", "QUANTITY_LABELS"]

QUANTITY_LABELS = {
    "step_time": "step time",
    "time_per_sample": "time per sample",
    "time_per_token": "time per token",
    "latency_per_sample": "latency per sample",
}
_PER = {"step_time": "/step", "time_per_sample": "/sample", "time_per_token": "/token",
        "latency_per_sample": "/sample"}
# Streamlit boxes by headline verdict: a verdict that cannot be trusted is amber, never green or red.
_BOXES = {"faster": "success", "slower": "error", "same": "info", "inconclusive": "warning"}
_STEP_SET_NAMES = {"headline": "Headline", "deltas": "Waterfall, operator and kernel deltas"}


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(float(v))


def _seconds(v: float | None, quantity: str) -> str:
    return format_value(v, "s") + _PER.get(quantity, "") if _finite(v) else "–"


def headline_sentence(view: Headline, baseline: str, candidate: str) -> str:
    """'Step time: optimized is 1.67× faster than baseline (50.00 ms/step → 30.00 ms/step; ratio 0.600, 95 % CI
    0.590–0.611)' — the verdict in words, naming the quantity judged."""
    what = QUANTITY_LABELS.get(view.quantity, view.quantity.replace("_", " ")).capitalize()
    if not _finite(view.ratio) or not view.ratio:
        return f"{what}: {candidate} vs {baseline}: not judged ({view.verdict or 'no data'})"
    r = float(view.ratio)
    ci = f", 95 % CI {view.ci95[0]:.3f}–{view.ci95[1]:.3f}" if view.ci95 and all(map(_finite, view.ci95)) else \
        ", no confidence interval"
    values = f"{_seconds(view.baseline, view.quantity)} → {_seconds(view.candidate, view.quantity)}; ratio {r:.3f}{ci}"
    if view.verdict == HeadlineVerdict.FASTER:
        return f"{what}: {candidate} is {1 / r:.2f}× faster than {baseline} ({values})"
    if view.verdict == HeadlineVerdict.SLOWER:
        return f"{what}: {candidate} is {r:.2f}× slower than {baseline} ({values})"
    if view.verdict == HeadlineVerdict.INCONCLUSIVE:
        return f"{what}: {candidate} vs {baseline}: inconclusive ({values})"
    if view.verdict == HeadlineVerdict.SAME:
        return f"{what}: {candidate} vs {baseline}: same, no difference beyond the practical threshold ({values})"
    return f"{what}: {candidate} vs {baseline}: {view.verdict or 'not judged'} ({values})"


def step_set_lines(cmp: Comparison) -> list[tuple[str, str]]:
    """(what uses it, which steps) for the headline and for the waterfall/op/kernel deltas."""
    return [(_STEP_SET_NAMES.get(name, name.capitalize()),
             f"{ss.description}; {ss.baseline} (baseline) / {ss.candidate} (candidate) steps")
            for name, ss in cmp.step_sets.items()]


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$])")


def _plain(text: str) -> str:
    """User text made inert for Streamlit's Markdown."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def render_headline(cmp: Comparison, *, compact: bool = False) -> Headline:
    """The verdict box (coloured by the headline verdict), then, unless ``compact``, the quantity,
    ratio, interval, verdict, replicates, method, reasons, step sets and the sign note; returns
    what it showed."""
    view = cmp.headline
    box = getattr(st, _BOXES.get(view.verdict, "info"))
    box(_plain(headline_sentence(view, cmp.baseline.label, cmp.candidate.label)))
    if compact:
        return view
    cols = st.columns(4)
    cols[0].metric("Judged by", QUANTITY_LABELS.get(view.quantity, view.quantity),
                   help="Time per sample when the sides process different numbers of samples per step (time per "
                        "token when tokens are known), step time otherwise.")
    ci = f"{view.ci95[0]:.3f}–{view.ci95[1]:.3f}" if view.ci95 else "none"
    cols[1].metric("Ratio (candidate / baseline)", f"{view.ratio:.3f}" if _finite(view.ratio) else "–",
                   help=f"95 % confidence interval: {ci}.")
    cols[1].caption(f"95 % CI {ci}")
    cols[2].metric("Verdict", view.verdict or "–",
                   help="faster / slower need an interval beyond the practical margin; inconclusive when the "
                        "sides' machine contention differs too much to trust a difference.")
    cols[3].metric("Replicates", f"{view.replicates.get('baseline', 1)} vs {view.replicates.get('candidate', 1)} runs",
                   help="Runs per side (a group gives several); with one run per side, run-to-run noise is not "
                        "covered by the interval.")
    if view.method:
        st.caption(_plain(f"Method: {view.method}"))
    # The machine-load caution has its own warning box under the verdict (compare_view): once per candidate.
    reasons = [r for r in view.reasons if not cmp.load_warning or r != cmp.load_warning]
    if reasons:
        st.markdown("\n".join(f"- {_plain(r)}" for r in reasons))
    for what, which in step_set_lines(cmp):
        st.caption(_plain(f"{what}: {which}"))
    if cmp.sign_note:
        st.info(_plain(cmp.sign_note), icon="ℹ️")
    return view
