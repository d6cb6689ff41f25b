"""The comparison report's public surface: terminal text, Markdown and HTML, and the parts the UI
shows (presentation layer).

Pure string building, split by format: ``report_text`` (``torchscope diff``), ``report_markdown``
(a PR comment), ``report_html`` (a self-contained page), over the sentences and display tables of
``comparison_text``, the names of ``names`` and the numbers of ``units``. Import from here.
"""
from __future__ import annotations

from app.presentation.comparison_text import (
    BREAKDOWN_DISPLAY_COLUMNS,
    VERDICT_DISPLAY_COLUMNS,
    breakdown_display_table,
    caution_said,
    headline,
    step_time_sentence,
    verdict_display_table,
)
from app.presentation.names import distinct_short_names, short_name
from app.presentation.report_html import format_report_html
from app.presentation.report_markdown import format_report_markdown
from app.presentation.report_text import format_verdict_text
from app.presentation.units import format_ratio, format_value

__all__ = [
    "BREAKDOWN_DISPLAY_COLUMNS",
    "VERDICT_DISPLAY_COLUMNS",
    "breakdown_display_table",
    "caution_said",
    "distinct_short_names",
    "format_ratio",
    "format_report_html",
    "format_report_markdown",
    "format_value",
    "format_verdict_text",
    "headline",
    "short_name",
    "step_time_sentence",
    "verdict_display_table",
]
