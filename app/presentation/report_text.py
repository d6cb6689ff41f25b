"""A comparison as terminal text: the output of ``torchscope diff`` and ``torchscope ab`` (presentation layer)."""
from __future__ import annotations

from app.analysis.compare.comparison import Comparison
from app.analysis.compare.memory_categories import MemoryCategoryComparison
from app.presentation.comparison_text import (
    CATEGORY_HEADER,
    VERDICT_HEADER,
    categories_of,
    category_rows,
    caution_said,
    compile_lines,
    headline,
    named_steps,
    ops_named,
    step_time_sentence,
    steps_phrase,
    top_rows,
    verdict_display_table,
    verdict_rows,
    with_spread,
)
from app.presentation.ranks_text import comparison_stragglers, straggler_change_sentence
from app.presentation.terminal import MAX_CELL_CHARS, terminal_lines, terminal_text
from app.presentation.text_table import text_table

__all__ = ["format_verdict_text"]


def format_verdict_text(cmp: Comparison, *, top: int = 10,
                        memory_categories: MemoryCategoryComparison | None = None) -> str:
    """The terminal output of ``torchscope diff``: headline, verdict table, breakdown and top op deltas."""
    parts = [f"headline: {headline(cmp)}", *(f"  - {r}" for r in cmp.headline.reasons),
             f"baseline:  {_label(cmp.baseline.label)} ({cmp.baseline.path})",
             f"candidate: {_label(cmp.candidate.label)} ({cmp.candidate.path})", step_time_sentence(cmp),
             *([f"caution: {cmp.load_warning}"] if cmp.load_warning and not caution_said(cmp) else []),
             *([f"sign: {cmp.sign_note}"] if cmp.sign_note else []),
             *compile_lines(cmp), "",
             text_table(VERDICT_HEADER, verdict_rows(cmp))]
    parts += verdict_display_table(cmp)[1]  # rows without data on either side, and why
    bd = cmp.breakdown
    if len(bd):
        dev = named_steps(bd[(bd["view"] == "device") & ((bd["baseline_us"] != 0) | (bd["candidate_us"] != 0))])
        parts += ["", f"per-step breakdown (trace; {steps_phrase(cmp)}, not the median step time above):",
                  text_table(["category", "baseline", "candidate", "delta"],
                              top_rows(dev, ["category", "baseline_us", "candidate_us", "delta_us"], 20))]
    if len(cmp.ops):
        parts += ["", f"top {top} operator changes (self time per step):",
                  text_table(["op", "baseline", "candidate", "delta", "change", "spread b/c"],
                              with_spread(cmp.ops, top_rows(ops_named(cmp.ops), ["name", "baseline_self_us",
                                                              "candidate_self_us", "delta_us", "change"], top)))]
    if len(cmp.kernels):
        parts += ["", f"top {top} kernel changes (time per step):",
                  text_table(["kernel", "baseline", "candidate", "delta", "change", "spread b/c"],
                              with_spread(cmp.kernels, top_rows(cmp.kernels, ["name", "baseline_us", "candidate_us",
                                                                                "delta_us", "change"], top)))]
    cats = categories_of(cmp, memory_categories)
    if cats.available:
        parts += ["", "memory by category (torch memory timeline; at the total peak, and each category's own peak):",
                  text_table(CATEGORY_HEADER, category_rows(cats))]
    stragglers = comparison_stragglers(cmp)
    sentence = straggler_change_sentence(stragglers, "baseline", "candidate") if stragglers else None
    parts += ["", sentence] if sentence else []
    parts += [""] + [f"note: {n}" for n in [*cmp.notes, *cats.notes] if n not in (cmp.load_warning, cmp.sign_note)]
    # Names reach the sentences too (headline, notes, config): each label is replaced by its safe
    # form wherever it occurs, then every line is made safe for a terminal.
    text = "\n".join(parts).rstrip()
    for label in {cmp.baseline.label, cmp.candidate.label}:
        if label and _label(label) != label:
            text = text.replace(label, _label(label))
    return terminal_lines(text) + "\n"


def _label(label: str) -> str:
    return terminal_text(label, MAX_CELL_CHARS)
