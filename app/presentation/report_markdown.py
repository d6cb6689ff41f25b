"""A comparison as Markdown for a PR comment (presentation layer).

Every cell is escaped (HTML, table pipes, backticks, emphasis, links), so a hostile op name can
neither break the table nor inject markup.
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from app.analysis.compare.comparison import Comparison
from app.analysis.compare.memory_categories import MemoryCategoryComparison
from app.presentation.comparison_text import (
    CATEGORY_HEADER,
    VERDICT_HEADER,
    categories_of,
    category_rows,
    caution_said,
    headline,
    named_steps,
    ops_named,
    step_time_sentence,
    steps_phrase,
    top_rows,
    verdict_display_table,
    verdict_rows,
)
from app.presentation.terminal import MAX_CELL_CHARS, terminal_text

__all__ = ["format_report_markdown"]


_ICONS = {"faster": "✅", "less": "✅", "better": "✅", "slower": "❌", "more": "⚠️", "worse": "⚠️", "same": "➖",
          "changed": "↔️", "n/a": "·", "inconclusive": "❔"}


def _md(text: Any) -> str:
    # A carriage return or a line separator ends a Markdown line as a newline does: controls and
    # bidi characters are shown escaped (app.presentation.terminal), so no name breaks a table row.
    s = html.escape(terminal_text(str(text).replace("\n", " ")), quote=False).replace("|", "\\|").replace("`", "'").replace("\n", " ")
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
    rows = [[f"{_ICONS.get(r[4], '')} {r[0]}", *r[1:]] for r in verdict_rows(cmp)]
    names = [_md(terminal_text(side.label, MAX_CELL_CHARS)) for side in (cmp.candidate, cmp.baseline)]
    out = [f"### Torchscope: {names[0]} vs {names[1]}", "",
           f"**{_md(headline(cmp))}**", "", *(f"- {_md(r)}" for r in cmp.headline.reasons), "",
           _md(step_time_sentence(cmp)),
           *(["", f"⚠️ {_md(cmp.load_warning)}"] if cmp.load_warning and not caution_said(cmp) else []),
           *(["", f"↕️ {_md(cmp.sign_note)}"] if cmp.sign_note else []), "",
           _md_table(VERDICT_HEADER, rows)]
    out += [f"<sub>{_md(h)}</sub>" for h in verdict_display_table(cmp)[1]]
    bd = cmp.breakdown
    if len(bd):
        dev = named_steps(bd[(bd["view"] == "device") & (bd["delta_us"].abs() > 0)])
        out += ["", f"#### Where the time went (per step, from the traces; {_md(steps_phrase(cmp))})", "",
                _md_table(["category", "baseline", "candidate", "delta"],
                          top_rows(dev, ["category", "baseline_us", "candidate_us", "delta_us"], 20))]
    if len(cmp.ops):
        out += ["", f"#### Top {top} operator changes (self time per step)", "",
                _md_table(["op", "baseline", "candidate", "delta", "change"],
                          top_rows(ops_named(cmp.ops), ["name", "baseline_self_us", "candidate_self_us", "delta_us", "change"],
                                    top))]
    if len(cmp.kernels):
        out += ["", f"#### Top {top} kernel changes (per step)", "",
                _md_table(["kernel", "baseline", "candidate", "delta", "change"],
                          top_rows(cmp.kernels, ["name", "baseline_us", "candidate_us", "delta_us", "change"], top))]
    cats = categories_of(cmp, memory_categories)
    if cats.available:
        out += ["", "#### Memory by category (torch memory timeline)", "",
                _md_table(CATEGORY_HEADER, category_rows(cats)), "",
                ("<sub>'at peak': held by the category when the total was highest; 'own peak': the most it held "
                 "at any time.</sub>")]
    if advice:
        out += ["", "#### Advisor findings", "",
                _md_table(["status", "finding", "fix"], [[a["status"], a["title"], a["fix"]] for a in advice])]
    if len(cmp.config):
        out += ["", "#### Config and environment that differ", "",
                _md_table(list(cmp.config.columns), cmp.config.astype(str).values.tolist())]
    shown = (cmp.load_warning, cmp.sign_note)
    if cmp.notes or cats.notes:
        out += ["", *(f"- {_md(n)}" for n in [*cmp.notes, *cats.notes] if n not in shown)]
    out += ["", (f"<sub>headline: {_md(cmp.headline.quantity_words)} over the steady-state steps, "
                 f"{_md(cmp.headline.method or 'no method')}; verdict threshold {cmp.options.threshold:.0%}; "
                 "see docs/compare.md</sub>")]
    return "\n".join(out) + "\n"
