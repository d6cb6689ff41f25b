"""A comparison as one self-contained HTML page (presentation layer).

The page receives its figures as ready HTML fragments (made by ``app.charts.compare.figures_to_html``)
and escapes every string that comes from a run (names, config values, op names) with ``html.escape``.
"""
from __future__ import annotations

import html
from collections.abc import Sequence

import pandas as pd

from app.analysis.compare.comparison import Comparison
from app.analysis.compare.memory_categories import MemoryCategoryComparison
from app.presentation.comparison_text import (
    CATEGORY_HEADER,
    breakdown_display_table,
    categories_of,
    category_rows,
    caution_said,
    headline,
    step_time_sentence,
    steps_phrase,
    verdict_display_table,
)
from app.presentation.names import distinct_short_names, short_name
from app.presentation.units import format_value

__all__ = ["format_report_html"]


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
    cats = categories_of(cmp, memory_categories)
    sections = [("Verdicts", _html_table(verdicts) + "".join(f"<p class='empty'>{html.escape(h)}</p>" for h in hidden))]
    sections += [(title, fragment) for title, fragment in figures]
    sections += [(f"Per-step breakdown, devices ({steps_phrase(cmp)})", _html_table(_rounded(breakdown_display_table(cmp, "device")))),
                 (f"Per-step breakdown, training phases ({steps_phrase(cmp)})", _html_table(_rounded(breakdown_display_table(cmp, "phase")))),
                 ("Operators (per step)", _html_table(cmp.ops, top=top)),
                 ("Kernels (per step)", _html_table(cmp.kernels, top=top)),
                 ("Logged metrics", _html_table(cmp.metrics)),
                 ("Memory by category (at the total peak, and each category's own peak)",
                  _html_table(pd.DataFrame(category_rows(cats), columns=CATEGORY_HEADER)) if cats.available else "<p class='empty'>no memory timeline in either run "
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
            f"{'<p>⚠️ ' + html.escape(cmp.load_warning) + '</p>' if cmp.load_warning and not caution_said(cmp) else ''}"
            f"{'<p>↕️ ' + html.escape(cmp.sign_note) + '</p>' if cmp.sign_note else ''}{body}"
            f"{'<h2>Notes</h2><ul>' + notes + '</ul>' if notes else ''}</body></html>\n")
