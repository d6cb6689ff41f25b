"""Aligned plain-text tables for terminals: the one table printer of the CLI and the text report
(presentation layer)."""
from __future__ import annotations

from collections.abc import Sequence

from app.presentation.terminal import MAX_CELL_CHARS, terminal_text

__all__ = ["text_table"]


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, rule: bool = True,
               numbers_right: bool = False, strip: bool = False, max_cell: int = MAX_CELL_CHARS) -> str:
    """``header`` and ``rows`` (text cells) as columns two spaces apart, each as wide as its widest cell.

    ``rule`` draws a line of dashes under the header; ``numbers_right`` aligns every column but the
    first to the right (columns of numbers); ``strip`` drops the spaces that pad a line's last cell.
    The three habits of the callers (``diff``: rule; ``analyze``: rule, numbers right; ``ls``: no
    rule, stripped) are kept so their outputs do not change. Every cell goes through
    app.presentation.terminal.terminal_text: control and bidi characters escaped (a name cannot
    forge a row), cut to ``max_cell`` characters."""
    table = [[terminal_text(h, max_cell) for h in header], *([terminal_text(c, max_cell) for c in r] for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        text = "  ".join(c.rjust(w) if numbers_right and i else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return text.rstrip() if strip else text

    lines = [line(table[0])]
    if rule:
        lines.append("  ".join("-" * w for w in widths))
    lines += [line(r) for r in table[1:]]
    return "\n".join(lines)
