"""User-controlled text made safe to print on a terminal (presentation layer, a leaf).

Run names, tags, op names and paths come from files anyone can write. Printed raw, a newline
forges a row of ``torchscope ls`` ("FAKE ✓ finished 2099"), an ANSI escape recolours or clears the
screen, a right-to-left override reverses what follows, and a 10,000-character name makes every
line of a table that long. :func:`terminal_text` shows such characters as visible escapes
(``\\n``, ``\\x1b``, ``\\u202e``) and cuts long text with an ellipsis. JSON output keeps the exact
value; only text meant for people goes through here.
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["terminal_text", "terminal_lines", "MAX_CELL_CHARS"]

# The widest table cell (characters): longer text is cut, with "…" as its last character.
MAX_CELL_CHARS = 100

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0 and C1 controls and DEL; line and paragraph separators; the bidirectional marks, embeddings,
# overrides and isolates (the "Trojan Source" characters).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_text(value: Any, width: int | None = None) -> str:
    """``value`` as text that prints as one line with nothing hidden: control and bidi characters
    escaped, then cut to ``width`` characters (the last one "…") when given."""
    text = _UNSAFE.sub(_escape, str(value))
    if width is not None and len(text) > width:
        text = text[: max(width - 1, 0)] + "…"
    return text


def terminal_lines(text: str, width: int | None = None) -> str:
    """Multi-line text (a report, the advisor's findings) with each line through
    :func:`terminal_text`: its own line breaks kept, every other control or bidi character escaped.
    Idempotent: text already made safe comes back unchanged."""
    return "\n".join(terminal_text(line, width) for line in text.split("\n"))
