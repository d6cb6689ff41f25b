"""Op, kernel and module names shortened for table cells, kept distinct (presentation layer)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["distinct_short_names", "short_name"]


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
