"""A comparison as text: terminal table, Markdown for a PR comment, self-contained HTML (analysis layer).

Pure string building. The HTML page receives its figures as ready HTML fragments (made by
``app.charts.compare.figures_to_html``) and escapes every string that comes from a run (names,
config values, op names) with ``html.escape``; Markdown cells are escaped too, so a hostile op
name cannot break the table or inject markup into a PR comment.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from app.analysis.compare.comparison import Comparison, no_interval_reason
from app.analysis.compare.json_doc import compile_counts
from app.analysis.compare.memory_categories import (
    MemoryCategoryComparison,
    compare_side_memory_categories,
)
from app.presentation.units import format_us

__all__ = ["format_value", "format_ratio", "short_name", "distinct_short_names", "verdict_display_table",
           "breakdown_display_table", "VERDICT_DISPLAY_COLUMNS", "BREAKDOWN_DISPLAY_COLUMNS", "format_verdict_text", "format_report_markdown", "format_report_html",
           "headline", "step_time_sentence"]

_ICONS = {"faster": "✅", "less": "✅", "better": "✅", "slower": "❌", "more": "⚠️", "worse": "⚠️", "same": "➖",
          "changed": "↔️", "n/a": "·", "inconclusive": "❔"}


def _finite(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def format_value(v: Any, unit: str = "") -> str:
    """A number for people: seconds as s/ms/µs, bytes as KiB…GiB, others with 4 significant digits."""
    if not _finite(v):
        return "–"
    x = float(v)
    if unit == "s":
        return f"{x:.3f} s" if abs(x) >= 1 else f"{x * 1e3:.2f} ms" if abs(x) >= 1e-3 else f"{x * 1e6:.1f} µs"
    if unit == "us":
        return format_us(x)
    if unit == "bytes":
        for scale, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(x) >= scale:
                return f"{x / scale:,.2f} {name}"
        return f"{x:,.0f} B"
    return f"{x:,.4g}" + (f" {unit}" if unit else "")


def _collapse(text: str, open_: str, close: str) -> str:
    """Replace every outermost ``open_ … close`` group by ``open_…close``."""
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            if depth == 0:
                out.append(open_ + "…")
            depth += 1
        elif ch == close and depth:
            depth -= 1
            if depth == 0:
                out.append(close)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_name(name: Any, width: int = 80) -> str:
    """An op or kernel name that fits a table cell: template and argument lists collapsed
    (``gemm<…>(…)``), then cut to ``width`` characters."""
    text = str(name)
    if len(text) > width:
        text = _collapse(_collapse(text.removeprefix("void "), "<", ">"), "(", ")")
    return text if len(text) <= width else text[: width - 1] + "…"


def _middle_cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def distinct_short_names(names: Sequence[Any], width: int = 80) -> list[str]:
    """``short_name`` of each name, except that names whose short forms collide are shown less
    shortened, until every distinct name has a distinct text: first with argument lists
    collapsed but template arguments kept (cut in the middle, so a name's head and its suffix
    stay), then in full. Equal names stay equal."""
    levels = (lambda t: short_name(t, width),
              lambda t: _middle_cut(_collapse(t.removeprefix("void "), "(", ")"), width),
              lambda t: _middle_cut(t, width),
              lambda t: t)
    texts = [str(n) for n in names]
    level = dict.fromkeys(texts, 0)
    while True:
        shown = {t: levels[level[t]](t) for t in level}
        owners: dict[str, set[str]] = {}
        for t, v in shown.items():
            owners.setdefault(v, set()).add(t)
        clashes = [t for group in owners.values() if len(group) > 1 for t in group if level[t] < len(levels) - 1]
        if not clashes:
            return [shown[t] for t in texts]
        for t in clashes:
            level[t] += 1


def format_ratio(ratio: Any, lo: Any = None, hi: Any = None) -> str:
    """``0.712× [0.70, 0.73]`` (the interval only when known)."""
    if not _finite(ratio):
        return "–"
    text = f"{float(ratio):.3f}×"
    if _finite(lo) and _finite(hi):
        text += f" [{float(lo):.3f}, {float(hi):.3f}]"
    return text


def headline(cmp: Comparison) -> str:
    """One sentence on the headline verdict: "optimized is 1.20× faster than baseline by time per
    sample (ratio 0.833, 95 % CI 0.801–0.866; hodges-lehmann/mann-whitney; 1 vs 1 runs)", or
    why there is none. Its reasons are ``cmp.headline.reasons``."""
    h, b, c = cmp.headline, cmp.baseline.label, cmp.candidate.label
    q = h.quantity_words
    if h.ratio is None or not _finite(h.ratio) or h.ratio <= 0:
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
    if est is None or not _finite(est.ratio):
        return "step time: no step times to compare"
    ci = f" (95 % CI of the time ratio {est.lo:.3f}–{est.hi:.3f})" if est.has_interval else ""
    values = f"median step {format_value(est.candidate, 's')} vs {format_value(est.baseline, 's')}"
    if not est.has_interval:
        return f"step time not judged, {no_interval_reason(est)} ({values}, ratio {est.ratio:.3f})"
    verdict = {"faster": "faster", "slower": "slower", "inconclusive": "inconclusive"}.get(
        str(cmp.step_verdict), "no significant difference")
    text = f"step time: {values}, ratio {est.ratio:.3f}: {verdict}{ci}"
    tp = cmp.throughput
    if tp is not None and _finite(tp.ratio):
        text += f"; throughput ({cmp.throughput_unit.replace('_per_', '/')}) {tp.ratio:.2f}×: {cmp.throughput_verdict}"
    return text


def _caution_said(cmp: Comparison) -> bool:
    """The machine-load caution is already one of the headline's reasons (print it once)."""
    return bool(cmp.load_warning) and cmp.load_warning in cmp.headline.reasons


def _verdict_rows(cmp: Comparison) -> list[list[str]]:
    table, _ = verdict_display_table(cmp)
    return [[r["quantity"], r["baseline"], r["candidate"],
             r["ratio"] + (f" [{r['95% CI'].replace('–', ', ')}]" if r["95% CI"] != "—" else ""), r["verdict"]]
            for r in table.to_dict(orient="records")]


VERDICT_DISPLAY_COLUMNS = ["quantity", "baseline", "candidate", "change", "ratio", "95% CI", "verdict", "note"]


def _has_data(v: Any) -> bool:
    return _finite(v)


def _pct_change(ratio: Any) -> str:
    return f"{100 * (float(ratio) - 1):+.1f} %" if _finite(ratio) else "—"


def verdict_display_table(cmp: Comparison) -> tuple[pd.DataFrame, list[str]]:
    """The verdict table for people: values with units (ms, MiB/GiB, samples/s), the change in
    %, the ratio and its 95 % interval as text, "—" where a value is missing. Rows with no
    value on either side are left out; the second item says which and why."""
    rows, hidden = [], []
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

        def value(v: Any, unit: str = unit, suffix: str = suffix) -> str:
            return format_value(v, unit) + suffix if _finite(v) else "—"

        ci = f"{float(r.ci_lo):.3f}–{float(r.ci_hi):.3f}" if _finite(r.ci_lo) and _finite(r.ci_hi) else "—"
        rows.append({"quantity": quantity, "baseline": value(r.baseline), "candidate": value(r.candidate),
                     "change": _pct_change(r.ratio), "ratio": f"{float(r.ratio):.3f}×" if _finite(r.ratio) else "—",
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


def _steps_phrase(cmp: Comparison) -> str:
    a, b = getattr(cmp, "breakdown_steps", (0, 0))
    if not (a and b):
        return "mean profiled step"
    return f"mean of {a} baseline and {b} candidate profiled step{'s' if max(a, b) > 1 else ''}"


def _text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(header)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


_VERDICT_HEADER = ["quantity", "baseline", "candidate", "ratio [95% CI]", "verdict"]


def _top_rows(df: pd.DataFrame, cols: Sequence[str], top: int) -> list[list[str]]:
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


def _with_spread(df: pd.DataFrame, rows: list[list[str]]) -> list[list[str]]:
    """Each row with the step-to-step spread of both sides ("±0.12 ms / ±0.30 ms", "—" unknown)."""
    def pm(v: Any) -> str:
        return "±" + format_value(v, "us") if _finite(v) else "—"

    a = df["baseline_spread_us"].tolist() if "baseline_spread_us" in df.columns else [None] * len(df)
    b = df["candidate_spread_us"].tolist() if "candidate_spread_us" in df.columns else [None] * len(df)
    return [[*r, f"{pm(x)} / {pm(y)}"] for r, x, y in zip(rows, a, b, strict=False)]


def _named_steps(part: pd.DataFrame) -> pd.DataFrame:
    return part.assign(category=part["category"].astype(str).replace("step", "mean profiled step"))


def _signed(v: Any) -> str:
    text = format_value(v, "us")
    return "+" + text if _finite(v) and float(v) > 0 else text


_CATEGORY_HEADER = ["category", "baseline at peak", "candidate at peak", "delta", "own peak delta"]


def _categories(cmp: Comparison, given: MemoryCategoryComparison | None) -> MemoryCategoryComparison:
    return given if given is not None else compare_side_memory_categories(cmp.baseline, cmp.candidate)


def _category_rows(cats: MemoryCategoryComparison) -> list[list[str]]:
    def signed(v: Any) -> str:
        text = format_value(v, "bytes")
        return "+" + text if _finite(v) and float(v) > 0 else text

    return [[str(r.category), format_value(r.baseline_bytes, "bytes"), format_value(r.candidate_bytes, "bytes"),
             signed(r.delta_bytes), signed(r.peak_delta_bytes)]
            for r in cats.table.astype(object).where(cats.table.notna(), None).itertuples(index=False)]


def _ops_named(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops matched by module (``--by module``) are named ``module · op``, ops matched by input
    shapes (``--by shape``) ``op [shapes]``: one row label per matched key."""
    if "module" in ops.columns:
        module = ops["module"].astype(str).replace("", "(outside modules)")
        return ops.assign(name=module + " · " + ops["name"].astype(str))
    if "input_shapes" in ops.columns:
        shapes = ops["input_shapes"].fillna("").astype(str).replace("", "(no shapes)")
        return ops.assign(name=ops["name"].astype(str) + " " + shapes)
    return ops


def _compile_lines(cmp: Comparison) -> list[str]:
    """'torch.compile: baseline 3 graph breaks, 4 recompiles; candidate none' when a side compiled."""
    counts = [compile_counts(cmp.baseline), compile_counts(cmp.candidate)]
    if not any(counts):
        return []

    def said(c: Any) -> str:
        if not c:
            return "not compiled"
        return (f"{c.get('graph_breaks', 0)} graph breaks, {c.get('recompiles', 0)} recompiles, "
                f"{c.get('frames', 0)} frames")

    return [f"torch.compile: baseline {said(counts[0])}; candidate {said(counts[1])} "
            "(compile steps left out of step time)"]


def format_verdict_text(cmp: Comparison, *, top: int = 10,
                        memory_categories: MemoryCategoryComparison | None = None) -> str:
    """The terminal output of ``torchscope diff``: headline, verdict table, breakdown and top op deltas."""
    parts = [f"headline: {headline(cmp)}", *(f"  - {r}" for r in cmp.headline.reasons),
             f"baseline:  {cmp.baseline.label} ({cmp.baseline.path})",
             f"candidate: {cmp.candidate.label} ({cmp.candidate.path})", step_time_sentence(cmp),
             *([f"caution: {cmp.load_warning}"] if cmp.load_warning and not _caution_said(cmp) else []),
             *([f"sign: {cmp.sign_note}"] if cmp.sign_note else []),
             *_compile_lines(cmp), "",
             _text_table(_VERDICT_HEADER, _verdict_rows(cmp))]
    parts += verdict_display_table(cmp)[1]  # rows without data on either side, and why
    bd = cmp.breakdown
    if len(bd):
        dev = _named_steps(bd[(bd["view"] == "device") & ((bd["baseline_us"] != 0) | (bd["candidate_us"] != 0))])
        parts += ["", f"per-step breakdown (trace; {_steps_phrase(cmp)}, not the median step time above):",
                  _text_table(["category", "baseline", "candidate", "delta"],
                              _top_rows(dev, ["category", "baseline_us", "candidate_us", "delta_us"], 20))]
    if len(cmp.ops):
        parts += ["", f"top {top} operator changes (self time per step):",
                  _text_table(["op", "baseline", "candidate", "delta", "change", "spread b/c"],
                              _with_spread(cmp.ops, _top_rows(_ops_named(cmp.ops), ["name", "baseline_self_us",
                                                              "candidate_self_us", "delta_us", "change"], top)))]
    if len(cmp.kernels):
        parts += ["", f"top {top} kernel changes (time per step):",
                  _text_table(["kernel", "baseline", "candidate", "delta", "change", "spread b/c"],
                              _with_spread(cmp.kernels, _top_rows(cmp.kernels, ["name", "baseline_us", "candidate_us",
                                                                                "delta_us", "change"], top)))]
    cats = _categories(cmp, memory_categories)
    if cats.available:
        parts += ["", "memory by category (torch memory timeline; at the total peak, and each category's own peak):",
                  _text_table(_CATEGORY_HEADER, _category_rows(cats))]
    parts += [""] + [f"note: {n}" for n in [*cmp.notes, *cats.notes] if n not in (cmp.load_warning, cmp.sign_note)]
    return "\n".join(parts).rstrip() + "\n"


def _md(text: Any) -> str:
    s = html.escape(str(text), quote=False).replace("|", "\\|").replace("`", "'").replace("\n", " ")
    return s.replace("[", "\\[").replace("]", "\\]").replace("*", "\\*").replace("_", "\\_")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(_md(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def format_report_markdown(cmp: Comparison, *, top: int = 10, advice: Sequence[dict[str, str]] = (),
                           memory_categories: MemoryCategoryComparison | None = None) -> str:
    """A Markdown comparison for a PR comment: headline, verdicts, breakdown, top op/kernel changes,
    advisor findings (rows of ``compare_advice.findings_diff_rows``), changed config keys.
    Every cell is escaped."""
    rows = [[f"{_ICONS.get(r[4], '')} {r[0]}", *r[1:]] for r in _verdict_rows(cmp)]
    out = [f"### Torchscope: {_md(cmp.candidate.label)} vs {_md(cmp.baseline.label)}", "",
           f"**{_md(headline(cmp))}**", "", *(f"- {_md(r)}" for r in cmp.headline.reasons), "",
           _md(step_time_sentence(cmp)),
           *(["", f"⚠️ {_md(cmp.load_warning)}"] if cmp.load_warning and not _caution_said(cmp) else []),
           *(["", f"↕️ {_md(cmp.sign_note)}"] if cmp.sign_note else []), "",
           _md_table(_VERDICT_HEADER, rows)]
    out += [f"<sub>{_md(h)}</sub>" for h in verdict_display_table(cmp)[1]]
    bd = cmp.breakdown
    if len(bd):
        dev = _named_steps(bd[(bd["view"] == "device") & (bd["delta_us"].abs() > 0)])
        out += ["", f"#### Where the time went (per step, from the traces; {_md(_steps_phrase(cmp))})", "",
                _md_table(["category", "baseline", "candidate", "delta"],
                          _top_rows(dev, ["category", "baseline_us", "candidate_us", "delta_us"], 20))]
    if len(cmp.ops):
        out += ["", f"#### Top {top} operator changes (self time per step)", "",
                _md_table(["op", "baseline", "candidate", "delta", "change"],
                          _top_rows(_ops_named(cmp.ops), ["name", "baseline_self_us", "candidate_self_us", "delta_us", "change"],
                                    top))]
    if len(cmp.kernels):
        out += ["", f"#### Top {top} kernel changes (per step)", "",
                _md_table(["kernel", "baseline", "candidate", "delta", "change"],
                          _top_rows(cmp.kernels, ["name", "baseline_us", "candidate_us", "delta_us", "change"], top))]
    cats = _categories(cmp, memory_categories)
    if cats.available:
        out += ["", "#### Memory by category (torch memory timeline)", "",
                _md_table(_CATEGORY_HEADER, _category_rows(cats)), "",
                "<sub>'at peak': held by the category when the total was highest; 'own peak': the most it held "
                "at any time.</sub>"]
    if advice:
        out += ["", "#### Advisor findings", "",
                _md_table(["status", "finding", "fix"], [[a["status"], a["title"], a["fix"]] for a in advice])]
    if len(cmp.config):
        out += ["", "#### Config and environment that differ", "",
                _md_table(list(cmp.config.columns), cmp.config.astype(str).values.tolist())]
    shown = (cmp.load_warning, cmp.sign_note)
    if cmp.notes or cats.notes:
        out += ["", *(f"- {_md(n)}" for n in [*cmp.notes, *cats.notes] if n not in shown)]
    out += ["", f"<sub>headline: {_md(cmp.headline.quantity_words)} over the steady-state steps, "
                f"{_md(cmp.headline.method or 'no method')}; verdict threshold {cmp.options.threshold:.0%}; "
                "see docs/compare.md</sub>"]
    return "\n".join(out) + "\n"


def _html_table(df: pd.DataFrame, *, top: int | None = None) -> str:
    if df is None or len(df) == 0:
        return "<p class='empty'>no data</p>"
    part = df.head(top) if top else df
    if "name" in part.columns:
        part = part.assign(name=distinct_short_names(part["name"].tolist(), 160))
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in part.columns)
    body = []
    for rec in part.itertuples(index=False):
        cells = []
        for c, v in zip(part.columns, rec, strict=True):
            text = format_value(v, "us") if str(c).endswith("_us") else format_value(v, "bytes") \
                if str(c).endswith("_bytes") else (f"{v:.4g}" if isinstance(v, float)
                                                    else str(v) if c == "name" else short_name(v, 160))
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _rounded(df: pd.DataFrame) -> pd.DataFrame:
    """Numbers of a display table as text with 2 decimals (the HTML table prints floats as %.4g)."""
    return df.apply(lambda col: col.map(lambda v: f"{v:,.2f}" if isinstance(v, float) else v))


_CSS = """body{font-family:system-ui,sans-serif;margin:2rem;color:#222}table{border-collapse:collapse;margin:.5rem 0 1.5rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;font-size:.9rem}th{background:#f4f4f4}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:2rem}.headline{font-size:1.1rem;font-weight:600}"""


def format_report_html(cmp: Comparison, figures: Sequence[tuple[str, str]] = (), *, top: int = 30,
                       advice: Sequence[dict[str, str]] = (),
                       memory_categories: MemoryCategoryComparison | None = None) -> str:
    """A self-contained HTML page: headline, verdicts, figures (HTML fragments, inserted as given),
    breakdown, operators, kernels, metrics, module and config diffs. Every run-provided
    string is escaped; the figure fragments must come from plotly (``figures_to_html``)."""
    verdicts, hidden = verdict_display_table(cmp)
    cats = _categories(cmp, memory_categories)
    sections = [("Verdicts", _html_table(verdicts) + "".join(f"<p class='empty'>{html.escape(h)}</p>" for h in hidden))]
    sections += [(title, fragment) for title, fragment in figures]
    sections += [(f"Per-step breakdown, devices ({_steps_phrase(cmp)})", _html_table(_rounded(breakdown_display_table(cmp, "device")))),
                 (f"Per-step breakdown, training phases ({_steps_phrase(cmp)})", _html_table(_rounded(breakdown_display_table(cmp, "phase")))),
                 ("Operators (per step)", _html_table(cmp.ops, top=top)),
                 ("Kernels (per step)", _html_table(cmp.kernels, top=top)),
                 ("Logged metrics", _html_table(cmp.metrics)),
                 ("Memory by category (at the total peak, and each category's own peak)",
                  _html_table(pd.DataFrame(_category_rows(cats), columns=_CATEGORY_HEADER)) if cats.available else "<p class='empty'>no memory timeline in either run "
                  "(record with torchscope run --memory-timeline)</p>"),
                 ("Advisor findings", _html_table(pd.DataFrame(list(advice)))),
                 ("Model structure", _html_table(cmp.modules)),
                 ("Config and environment that differ", _html_table(cmp.config))]
    title = html.escape(f"{cmp.candidate.label} vs {cmp.baseline.label}")
    body = "".join(f"<h2>{html.escape(t)}</h2>\n{content}\n" for t, content in sections)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in [*cmp.notes, *cats.notes]
                    if n not in (cmp.load_warning, cmp.sign_note))
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Torchscope: {title}</title>"
            f"<style>{_CSS}</style></head><body><h1>Torchscope comparison: {title}</h1>"
            f"<p class='headline'>{html.escape(headline(cmp))}</p>"
            f"<ul>{''.join('<li>' + html.escape(r) + '</li>' for r in cmp.headline.reasons)}</ul>"
            f"<p>{html.escape(step_time_sentence(cmp))}</p>"
            f"{'<p>⚠️ ' + html.escape(cmp.load_warning) + '</p>' if cmp.load_warning and not _caution_said(cmp) else ''}"
            f"{'<p>↕️ ' + html.escape(cmp.sign_note) + '</p>' if cmp.sign_note else ''}{body}"
            f"{'<h2>Notes</h2><ul>' + notes + '</ul>' if notes else ''}</body></html>\n")
