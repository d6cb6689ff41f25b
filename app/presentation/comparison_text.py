"""A comparison's parts as people read them: the headline and step-time sentences, the verdict and
breakdown display tables, and the rows the terminal, Markdown and HTML reports share (presentation layer).

Rows are lists of text cells; each report format escapes them its own way.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from app.analysis.compare.comparison import Comparison, no_interval_reason
from app.analysis.compare.memory_categories import (
    MemoryCategoryComparison,
    compare_side_memory_categories,
)
from app.presentation.compare_json import compile_counts
from app.presentation.names import distinct_short_names, metric_display, short_name
from app.presentation.units import format_change, format_shape, format_value, is_finite_number

__all__ = [
    "BREAKDOWN_DISPLAY_COLUMNS",
    "CATEGORY_HEADER",
    "VERDICT_DISPLAY_COLUMNS",
    "VERDICT_HEADER",
    "breakdown_display_table",
    "categories_of",
    "category_rows",
    "caution_said",
    "compile_lines",
    "headline",
    "named_steps",
    "ops_named",
    "step_time_sentence",
    "steps_phrase",
    "top_rows",
    "verdict_display_table",
    "verdict_rows",
    "with_spread",
]


def headline(cmp: Comparison) -> str:
    """One sentence on the headline verdict: "optimized is 1.20× faster than baseline by time per
    sample (ratio 0.833, 95 % CI 0.801–0.866; hodges-lehmann/mann-whitney; 1 vs 1 runs)", or
    why there is none. Its reasons are ``cmp.headline.reasons``."""
    h, b, c = cmp.headline, cmp.baseline.label, cmp.candidate.label
    q = h.quantity_words
    if h.ratio is None or not is_finite_number(h.ratio) or h.ratio <= 0:
        return f"{c} vs {b}: {q} inconclusive (no steady-state step times on one side)"
    r = float(h.ratio)
    ci = f"95 % CI {h.ci95[0]:.3f}–{h.ci95[1]:.3f}" if h.ci95 else "no interval"
    if h.verdict == "faster":
        lead = f"{c} is {1 / r:.2f}× faster than {b} by {q}"
    elif h.verdict == "slower":
        lead = f"{c} is {r:.2f}× slower than {b} by {q}"
    elif h.verdict == "same":
        lead = f"{c} vs {b}: no significant difference in {q}"
    else:
        lead = f"{c} vs {b}: inconclusive on {q}, {_why_inconclusive(cmp)}"
    runs = f"{h.replicates.get('baseline', 1)} vs {h.replicates.get('candidate', 1)} runs"
    return f"{lead} (ratio {r:.3f}, {ci}; {h.method or 'no method'}; {runs})"


def _why_inconclusive(cmp: Comparison) -> str:
    if cmp.contention.inconclusive:
        return "the sides differ in contention (other processes took more of the machine during one)"
    for r in cmp.headline.reasons:
        if r.startswith(("too few steps to judge", "no confidence interval")):
            return r.split(":")[0]  # the reasons below say the rest
    return "see the reasons"


def step_time_sentence(cmp: Comparison) -> str:
    """The median step time row in one sentence ("median step 70.00 ms vs 100.00 ms: faster
    (95 % CI of the time ratio 0.690–0.712)"), or why it is not judged."""
    est = cmp.step_time
    if est is None or not is_finite_number(est.ratio):
        return "step time: no step times to compare"
    ci = f" (95 % CI of the time ratio {est.lo:.3f}–{est.hi:.3f})" if est.has_interval else ""
    values = f"median step {format_value(est.candidate, 's')} vs {format_value(est.baseline, 's')}"
    if not est.has_interval:
        return f"step time not judged, {no_interval_reason(est)} ({values}, ratio {est.ratio:.3f})"
    verdict = {"faster": "faster", "slower": "slower", "inconclusive": "inconclusive"}.get(
        str(cmp.step_verdict), "no significant difference")
    text = f"step time: {values}, ratio {est.ratio:.3f}: {verdict}{ci}"
    tp = cmp.throughput
    if tp is not None and is_finite_number(tp.ratio):
        text += f"; throughput ({cmp.throughput_unit.replace('_per_', '/')}) {tp.ratio:.2f}×: {cmp.throughput_verdict}"
    return text


def caution_said(cmp: Comparison) -> bool:
    """The machine-load caution is already one of the headline's reasons (print it once)."""
    return bool(cmp.load_warning) and cmp.load_warning in cmp.headline.reasons


def verdict_rows(cmp: Comparison) -> list[list[str]]:
    table, _ = verdict_display_table(cmp)
    return [[r["quantity"], r["baseline"], r["candidate"],
             r["ratio"] + (f" [{r['95% CI'].replace('–', ', ')}]" if r["95% CI"] != "—" else ""), r["verdict"]]
            for r in table.to_dict(orient="records")]


VERDICT_DISPLAY_COLUMNS = ["quantity", "baseline", "candidate", "change", "ratio", "95% CI", "verdict", "note"]


def _has_data(v: Any) -> bool:
    return is_finite_number(v)


def _pct_change(ratio: Any) -> str:
    return format_change(ratio) or "—"


def _metric_keys(cmp: Comparison) -> set[str]:
    metrics = getattr(cmp, "metrics", None)
    if metrics is None or len(metrics) == 0 or "metric" not in metrics.columns:
        return set()
    return {str(m) for m in metrics["metric"]}


def _metric_row(quantity: str, keys: set[str]) -> tuple[str, str] | None:
    """(metric key, "final" or "best") of a verdict row of a logged metric, else None."""
    for which in ("final", "best"):
        key = quantity.removesuffix(f" ({which})")
        if key != quantity and key in keys:
            return key, which
    return None


def verdict_display_table(cmp: Comparison) -> tuple[pd.DataFrame, list[str]]:
    """The verdict table for people: values with units (ms, MiB/GiB, samples/s), the change in
    %, the ratio and its 95 % interval as text, "—" where a value is missing. Rows with no
    value on either side are left out; the second item says which and why."""
    rows, hidden = [], []
    metric_keys = _metric_keys(cmp)
    for r in cmp.verdicts.itertuples(index=False):
        quantity = str(r.quantity)
        if not _has_data(r.baseline) and not _has_data(r.candidate):
            why = str(r.note) if quantity == "peak memory" else "no values on either side"
            hidden.append(f"{quantity}: not compared ({why})")
            continue
        unit = r.unit if r.unit in ("s", "bytes") else ""
        suffix = "" if unit else (f" {r.unit}" if r.unit else "")
        if quantity == "peak memory" and cmp.peak_memory[0].source != "none":
            quantity = f"peak memory ({cmp.peak_memory[0].quantity})"
        scale = 1.0
        if (metric := _metric_row(quantity, metric_keys)) is not None:
            # a logged metric's row: its human name and display unit (data_time_s → ms), as on the Run page
            key, which = metric
            shown = metric_display(key)
            name = shown.label.removesuffix(f" ({shown.unit})") if shown.unit else shown.label
            quantity, scale, unit, suffix = f"{name} ({which})", shown.scale, shown.unit, ""

        def value(v: Any, unit: str = unit, suffix: str = suffix, scale: float = scale) -> str:
            return format_value(float(v) * scale, unit) + suffix if is_finite_number(v) else "—"

        ci = f"{float(r.ci_lo):.3f}–{float(r.ci_hi):.3f}" if is_finite_number(r.ci_lo) and is_finite_number(r.ci_hi) else "—"
        rows.append({"quantity": quantity, "baseline": value(r.baseline), "candidate": value(r.candidate),
                     "change": _pct_change(r.ratio), "ratio": f"{float(r.ratio):.3f}×" if is_finite_number(r.ratio) else "—",
                     "95% CI": ci, "verdict": str(r.verdict) or "—", "note": str(r.note) if r.note else ""})
    return pd.DataFrame(rows, columns=VERDICT_DISPLAY_COLUMNS), hidden


BREAKDOWN_DISPLAY_COLUMNS = ["category", "baseline (ms/step)", "candidate (ms/step)", "Δ (ms/step)",
                             "Δ share of baseline step (%)"]


def breakdown_display_table(cmp: Comparison, view: str = "device") -> pd.DataFrame:
    """The breakdown of one ``view`` for people: ms per step, the delta's share of the baseline
    step in %, categories empty on both sides left out, the step row named "mean profiled step"."""
    bd = cmp.breakdown
    if bd is None or len(bd) == 0:
        return pd.DataFrame(columns=BREAKDOWN_DISPLAY_COLUMNS)
    part = bd[(bd["view"] == view) & ((bd["baseline_us"] != 0) | (bd["candidate_us"] != 0))]
    name = part["category"].astype(str).replace("step", "mean profiled step")
    return pd.DataFrame({
        "category": name.to_numpy(),
        "baseline (ms/step)": (part["baseline_us"].astype(float) / 1e3).to_numpy(),
        "candidate (ms/step)": (part["candidate_us"].astype(float) / 1e3).to_numpy(),
        "Δ (ms/step)": (part["delta_us"].astype(float) / 1e3).to_numpy(),
        "Δ share of baseline step (%)": (part["delta_share"].astype(float) * 100).to_numpy(),
    }, columns=BREAKDOWN_DISPLAY_COLUMNS)


def steps_phrase(cmp: Comparison) -> str:
    a, b = getattr(cmp, "breakdown_steps", (0, 0))
    if not (a and b):
        return "mean profiled step"
    return f"mean of {a} baseline and {b} candidate profiled step{'s' if max(a, b) > 1 else ''}"


VERDICT_HEADER = ["quantity", "baseline", "candidate", "ratio [95% CI]", "verdict"]


def top_rows(df: pd.DataFrame, cols: Sequence[str], top: int) -> list[list[str]]:
    if df is None or len(df) == 0:
        return []
    part = df.head(top)
    # Names are shortened together, so two different kernels never print as the same text.
    names = dict(zip(part.index, distinct_short_names(part["name"].tolist(), 100), strict=True)) \
        if "name" in part.columns else {}
    out = []
    for idx, rec in zip(part.index, part.to_dict(orient="records"), strict=True):
        out.append([names[idx] if c == "name" else _signed(rec[c]) if c.startswith("delta")
                    else format_value(rec[c], "us") if c.endswith("_us")
                    else (f"{rec[c]:.2f}" if isinstance(rec[c], float) else short_name(rec[c], 100)) for c in cols])
    return out


def with_spread(df: pd.DataFrame, rows: list[list[str]]) -> list[list[str]]:
    """Each row with the step-to-step spread of both sides ("±0.12 ms / ±0.30 ms", "—" unknown)."""
    def pm(v: Any) -> str:
        return "±" + format_value(v, "us") if is_finite_number(v) else "—"

    a = df["baseline_spread_us"].tolist() if "baseline_spread_us" in df.columns else [None] * len(df)
    b = df["candidate_spread_us"].tolist() if "candidate_spread_us" in df.columns else [None] * len(df)
    return [[*r, f"{pm(x)} / {pm(y)}"] for r, x, y in zip(rows, a, b, strict=False)]


def named_steps(part: pd.DataFrame) -> pd.DataFrame:
    return part.assign(category=part["category"].astype(str).replace("step", "mean profiled step"))


def _signed(v: Any) -> str:
    text = format_value(v, "us")
    return "+" + text if is_finite_number(v) and float(v) > 0 else text


CATEGORY_HEADER = ["category", "baseline at peak", "candidate at peak", "delta", "own peak delta"]


def categories_of(cmp: Comparison, given: MemoryCategoryComparison | None) -> MemoryCategoryComparison:
    return given if given is not None else compare_side_memory_categories(cmp.baseline, cmp.candidate)


def category_rows(cats: MemoryCategoryComparison) -> list[list[str]]:
    def signed(v: Any) -> str:
        text = format_value(v, "bytes")
        return "+" + text if is_finite_number(v) and float(v) > 0 else text

    return [[str(r.category), format_value(r.baseline_bytes, "bytes"), format_value(r.candidate_bytes, "bytes"),
             signed(r.delta_bytes), signed(r.peak_delta_bytes)]
            for r in cats.table.astype(object).where(cats.table.notna(), None).itertuples(index=False)]


def ops_named(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops matched by module (``--by module``) are named ``module · op``, ops matched by input
    shapes (``--by shape``) ``op [shapes]``: one row label per matched key."""
    if "module" in ops.columns:
        module = ops["module"].astype(str).replace("", "(outside modules)")
        return ops.assign(name=module + " · " + ops["name"].astype(str))
    if "input_shapes" in ops.columns:
        raw = ops["input_shapes"].fillna("").astype(str)
        shapes = raw.map(format_shape)
        # Formatting leaves out empty and non-tensor entries: where that makes two keys of one op
        # look the same, those keep the recorded text, so every row stays one matched key.
        clash = pd.DataFrame({"n": ops["name"].astype(str), "s": shapes, "r": raw}).groupby(["n", "s"])["r"] \
            .transform("nunique") > 1
        shapes = shapes.where(~clash, raw).replace("", "(no shapes)")
        return ops.assign(name=ops["name"].astype(str) + " [" + shapes + "]")
    return ops


def compile_lines(cmp: Comparison) -> list[str]:
    """'torch.compile: baseline 3 graph breaks, 4 recompiles; candidate none' when a side compiled."""
    counts = [compile_counts(cmp.baseline), compile_counts(cmp.candidate)]
    if not any(counts):
        return []

    def said(c: Any) -> str:
        if not c:
            return "not compiled"
        return (f"{c.get('graph_breaks', 0)} graph breaks, {c.get('recompiles', 0)} recompiles, "
                f"{c.get('frames', 0)} frames")

    return [(f"torch.compile: baseline {said(counts[0])}; candidate {said(counts[1])} "
             "(compile steps left out of step time)")]
