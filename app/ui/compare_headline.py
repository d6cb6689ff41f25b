"""The Compare page's headline: the quantity judged, its ratio, interval, verdict, method, replicates,
reasons, and the two step sets (UI layer).

The comparison's ``headline`` (``app.analysis.compare.comparison.Headline``: quantity, baseline, candidate,
ratio, ci95, verdict, method, replicates, reasons), ``step_sets`` and ``sign_note`` are read with
``getattr`` fallbacks: a Comparison without them (older analysis code) is shown with the step-time
verdict as its headline, one run per side, and the step sets described from its step tables.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from app.analysis.compare.comparison import Comparison
from app.analysis.compare.headline import HeadlineVerdict
from app.presentation.units import format_value

__all__ = ["HeadlineView", "headline_view", "headline_sentence", "step_set_lines", "render_headline",
           "QUANTITY_LABELS"]

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
_FALLBACK_METHOD = "percentile bootstrap of the ratio of medians (steps of one run per side)"


@dataclass(frozen=True)
class HeadlineView:
    """What the page shows of a comparison's headline (the contract's Headline fields)."""
    quantity: str
    baseline: float | None
    candidate: float | None
    ratio: float | None
    ci95: tuple[float, float] | None
    verdict: str
    method: str
    replicates: Mapping[str, int]
    reasons: tuple[str, ...] = ()
    from_headline: bool = True  # False: derived from the step-time verdict (no Headline yet)
    extra: Mapping[str, Any] = field(default_factory=dict)


def _finite(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _replicates(cmp: Comparison) -> dict[str, int]:
    return {role: max(1, len(getattr(side, "replicates", ()) or ()))
            for role, side in (("baseline", cmp.baseline), ("candidate", cmp.candidate))}


def headline_view(cmp: Comparison) -> HeadlineView:
    """The comparison's headline, or one derived from its step-time verdict when it has none."""
    h = getattr(cmp, "headline", None)
    if h is not None:
        ci = getattr(h, "ci95", None)
        return HeadlineView(
            quantity=str(getattr(h, "quantity", "step_time")), baseline=getattr(h, "baseline", None),
            candidate=getattr(h, "candidate", None), ratio=getattr(h, "ratio", None),
            ci95=(float(ci[0]), float(ci[1])) if ci is not None and len(ci) == 2 else None,
            verdict=str(getattr(h, "verdict", "")), method=str(getattr(h, "method", "") or ""),
            replicates=dict(getattr(h, "replicates", None) or _replicates(cmp)),
            reasons=tuple(str(r) for r in (getattr(h, "reasons", None) or ())))
    est = cmp.step_time
    reasons = [cmp.load_warning] if cmp.load_warning else []
    if est is None:
        return HeadlineView("step_time", None, None, None, None, str(cmp.step_verdict), "", _replicates(cmp),
                            tuple(reasons + ["no step times on one side"]), from_headline=False)
    reps = _replicates(cmp)
    if reps["baseline"] == 1 and reps["candidate"] == 1:
        reasons.append("one run per side: the interval covers step-to-step noise, not run-to-run noise")
    return HeadlineView(
        "step_time", est.baseline, est.candidate, est.ratio, (est.lo, est.hi) if est.has_interval else None,
        str(cmp.step_verdict), str(getattr(est, "method", "") or _FALLBACK_METHOD), reps, tuple(reasons),
        from_headline=False)


def _seconds(v: float | None, quantity: str) -> str:
    return format_value(v, "s") + _PER.get(quantity, "") if _finite(v) else "–"


def headline_sentence(view: HeadlineView, baseline: str, candidate: str) -> str:
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


def _kept(table: Any) -> int:
    try:
        return int(table["kept"].astype(bool).sum())
    except (KeyError, TypeError, AttributeError):
        return 0


def _describe(value: Any) -> str:
    """One step set as text, whatever shape the analysis gives it: text, a mapping or an object
    with ``to_json`` (compare's StepSet: name, description, baseline and candidate step counts)."""
    if isinstance(value, str):
        return value
    to_json = getattr(value, "to_json", None)
    if callable(to_json) and not isinstance(value, Mapping):
        return _describe(to_json())
    if not isinstance(value, Mapping):
        return str(value)
    desc = str(value.get("description") or value.get("label") or "")
    counts = ""
    if "baseline" in value and "candidate" in value:
        counts = f"{value['baseline']} (baseline) / {value['candidate']} (candidate) steps"
    rest = [f"{k}: {v}" for k, v in value.items() if k not in ("description", "label", "name", "baseline",
                                                                "candidate")]
    return "; ".join(p for p in (desc, counts, *rest) if p)


def step_set_lines(cmp: Comparison) -> list[tuple[str, str]]:
    """(what uses it, which steps) for the headline and for the waterfall/op/kernel deltas."""
    sets = getattr(cmp, "step_sets", None)
    if sets:
        if isinstance(sets, Mapping):
            deltas = "Waterfall, operator and kernel deltas"
            names = {"headline": "Headline", "deltas": deltas, "profiled": deltas, "breakdown": deltas}
            return [(names.get(str(k), str(k).replace("_", " ").capitalize()), _describe(v)) for k, v in sets.items()]
        return [("Step sets", _describe(sets))]
    a, b = (_kept(t) for t in cmp.step_times)
    lines = [("Headline", f"steady-state steps: warm-up, profiled and evaluation steps left out; {a} (baseline) / "
                          f"{b} (candidate) steps")]
    pa, pb = cmp.breakdown_steps
    if pa or pb:
        lines.append(("Waterfall, operator and kernel deltas", "typical profiled steps: evaluation steps and "
                      f"outliers left out; {pa} (baseline) / {pb} (candidate) steps"))
    return lines


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$])")


def _plain(text: str) -> str:
    """User text made inert for Streamlit's Markdown."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def render_headline(cmp: Comparison, *, compact: bool = False) -> HeadlineView:
    """The verdict box (coloured by the headline verdict), then, unless ``compact``, the quantity,
    ratio, interval, verdict, replicates, method, reasons, step sets and the sign note; returns
    what it showed."""
    view = headline_view(cmp)
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
    if view.reasons:
        st.markdown("\n".join(f"- {_plain(r)}" for r in view.reasons))
    for what, which in step_set_lines(cmp):
        st.caption(_plain(f"{what}: {which}"))
    note = getattr(cmp, "sign_note", "")
    if note:
        st.info(_plain(note), icon="ℹ️")
    return view
