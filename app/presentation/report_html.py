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
from app.presentation.units import MISSING, format_flops, format_shape, is_finite_number

__all__ = ["format_report_html", "column_title", "column_cell", "module_display_table"]


def column_title(column: str) -> str:
    """A table column for people, saying its unit: ``baseline_self_us`` → "baseline self (ms)"
    (its cells are then milliseconds, column_cell), ``candidate_bytes`` → "candidate (MiB)",
    ``delta_us`` → "Δ (ms)", ``baseline_flops`` → "baseline FLOPs" (cells with their unit: "1.20 GFLOP"),
    ``baseline_calls`` → "baseline calls"."""
    c = str(column)
    unit = ""
    if c.endswith("_flops"):
        return c.removesuffix("_flops").replace("_", " ") + " FLOPs"
    for suffix, u in (("_us", "ms"), ("_bytes", "MiB")):
        if c.endswith(suffix) or c == suffix[1:]:
            c, unit = c.removesuffix(suffix).removesuffix(suffix[1:]), u
    words = c.replace("_", " ").replace("delta", "Δ").strip()
    return f"{words} ({unit})" if unit else words


def column_cell(column: str, v: object) -> str:
    """A cell of ``column`` in the unit column_title names: µs as ms, bytes as MiB, FLOPs with their unit."""
    c = str(column)
    if not is_finite_number(v) or isinstance(v, bool):
        return MISSING if v is None or (isinstance(v, float) and v != v) else short_name(v, 160)
    x = float(v)  # type: ignore[arg-type]  # is_finite_number said it converts
    if c.endswith("_us") or c == "us":
        return f"{x / 1e3:,.3f}"
    if c.endswith("_bytes"):
        return f"{x / (1 << 20):,.2f}"
    if c.endswith("_flops"):
        return format_flops(x)
    return f"{x:,.4g}" if isinstance(v, float) else f"{int(x):,}" if x == int(x) else f"{x:,.4g}"


def _html_table(df: pd.DataFrame, *, top: int | None = None) -> str:
    if df is None or len(df) == 0:
        return "<p class='empty'>no data</p>"
    part = df.head(top) if top else df
    if "name" in part.columns:
        part = part.assign(name=distinct_short_names(part["name"].tolist(), 160))
    head = "".join(f"<th>{html.escape(column_title(c))}</th>" for c in part.columns)
    body = []
    for rec in part.itertuples(index=False):
        cells = []
        for c, v in zip(part.columns, rec, strict=True):
            if str(c).endswith("_shape"):
                v = format_shape(v) or v
            text = str(v) if c == "name" else v if isinstance(v, str) and not str(c).endswith(("_us", "_bytes")) \
                else column_cell(c, v)
            cells.append(f"<td>{html.escape(str(text) if c == 'name' else short_name(text, 160))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# More "shape" rows than this in the model table are one batch-size change seen in every module:
# they are collapsed into one explained row.
_MAX_SHAPE_ROWS = 5


def module_display_table(modules: pd.DataFrame) -> pd.DataFrame:
    """The model-structure diff for the report: when many modules changed only their output shape
    (a batch-size change shows in every module), one row says how many and how (the first
    module's shapes as the example), instead of one row each."""
    if modules is None or len(modules) == 0 or "change" not in modules.columns:
        return modules
    shape = modules[modules["change"].astype(str) == "shape"]
    if len(shape) <= _MAX_SHAPE_ROWS:
        return modules
    first = shape.iloc[0]
    example = (f"e.g. {first.get('path')}: {format_shape(first.get('baseline_shape'))} → "
               f"{format_shape(first.get('candidate_shape'))}")
    why = _batch_note(shape)
    row = dict.fromkeys(modules.columns, "")
    row.update({"path": f"{len(shape)} modules", "change": f"output shape changed ({why}; {example})"})
    rest = modules[modules["change"].astype(str) != "shape"]
    return pd.concat([rest, pd.DataFrame([row])], ignore_index=True)


def _batch_note(shape: pd.DataFrame) -> str:
    """'only the first dimension (batch size) changed' when it is so for every row, else 'shapes differ'."""
    def first_dims(text: object) -> tuple[str, str] | None:
        dims = str(text or "").replace("×", "x").split("x")  # graph_diff's shapes: "32x64"
        return (dims[0], "x".join(dims[1:])) if dims[0] else None
    same_rest = True
    for a, b in zip(shape.get("baseline_shape", []), shape.get("candidate_shape", [])):
        fa, fb = first_dims(a), first_dims(b)
        if fa is None or fb is None or fa[1] != fb[1]:
            same_rest = False
            break
    return "only the first dimension, the batch size, changed" if same_rest else "shapes differ"


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
                 ("Model structure", _html_table(module_display_table(cmp.modules))),
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
