"""Numbers with units for people: bytes, durations, percentages (presentation layer; a leaf).

This module imports nothing from the project, so any layer may use it for the numbers in
its texts (the advisor does, for its findings). Each function is the one copy of a helper
that used to live in several places; the outputs are kept byte for byte:

- ``format_bytes`` / ``format_seconds`` were ``app.data.runs.format_bytes`` / ``format_seconds``;
- ``format_ms_of_us`` was ``advisor.common.fmt_ms`` (and, with ``grouped=True``,
  ``trace.step_window._fmt_ms``);
- ``format_us`` was ``cli.analyze_cmd._fmt_us``;
- ``format_percent`` was ``advisor.common.fmt_pct``;
- ``format_value`` / ``format_ratio`` are the comparison report's numbers (three significant
  decimals for seconds, two for bytes; its own texts, not those of ``format_seconds``).

Missing values (None, NaN, ±inf) print as an en dash where the old helper did so.
"""
from __future__ import annotations

import math
from typing import Any

__all__ = [
    "MISSING",
    "format_bytes",
    "format_change",
    "format_count",
    "format_flops",
    "format_shape",
    "format_ms",
    "format_ms_of_us",
    "format_percent",
    "format_ratio",
    "format_seconds",
    "format_us",
    "format_value",
    "is_finite_number",
]


MISSING = "–"  # what a missing number prints as


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n: float | None) -> str:
    """1536 → '1.5 KiB' (binary units, whole bytes below 1 KiB); None/NaN → '–'."""
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return MISSING
    value = float(n)
    for unit in _BYTE_UNITS:
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover  (the loop returns at TiB)


def format_seconds(s: float | None) -> str:
    """0.0123 → '12.3 ms'; 2.5 → '2.50 s'; 75 → '1m 15s'; 7300 → '2h 01m'; None/NaN → '–'."""
    if s is None or (isinstance(s, float) and not math.isfinite(s)):
        return MISSING
    s = float(s)
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    if s < 60:
        return f"{s:.2f} s"
    minutes, sec = divmod(round(s), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {sec:02d}s"


def format_ms(seconds: float, *, grouped: bool = False) -> str:
    """A duration in seconds as milliseconds with two decimals: 0.0123 → '12.30 ms'.

    ``grouped`` adds thousands separators (1234.5 s → '1,234,500.00 ms'). For a value in
    microseconds use :func:`format_ms_of_us`, which divides once and so prints the same
    digits as the old helpers did."""
    return f"{seconds * 1e3:,.2f} ms" if grouped else f"{seconds * 1e3:.2f} ms"


def format_ms_of_us(us: float, *, grouped: bool = False) -> str:
    """A duration in microseconds as milliseconds with two decimals: 12345.0 → '12.35 ms'.

    ``grouped`` adds thousands separators: 1234567 → '1,234.57 ms'."""
    return f"{us / 1e3:,.2f} ms" if grouped else f"{us / 1e3:.2f} ms"


def format_us(us: float) -> str:
    """A duration in microseconds, in ms from 1 ms up: 1500 → '1.50 ms', 12.34 → '12.3 µs';
    NaN → '–'."""
    if math.isnan(us):
        return MISSING
    return f"{us / 1e3:,.2f} ms" if abs(us) >= 1000 else f"{us:,.1f} µs"


def format_percent(x: float) -> str:
    """A share (0..1) as a percentage with one decimal: 0.1234 → '12.3%'."""
    return f"{x * 100:.1f}%"


def is_finite_number(v: Any) -> bool:
    """True when ``v`` converts to a finite float (None, text, NaN and ±inf do not)."""
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def format_value(v: Any, unit: str = "") -> str:
    """A number for people: seconds as s/ms/µs, bytes as KiB…GiB, others with 4 significant digits."""
    if not is_finite_number(v):
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


def format_ratio(ratio: Any, lo: Any = None, hi: Any = None) -> str:
    """``0.712× [0.70, 0.73]`` (the interval only when known)."""
    if not is_finite_number(ratio):
        return "–"
    text = f"{float(ratio):.3f}×"
    if is_finite_number(lo) and is_finite_number(hi):
        text += f" [{float(lo):.3f}, {float(hi):.3f}]"
    return text


def format_change(ratio: Any) -> str | None:
    """A candidate/baseline ratio as a signed change: 1.123 → '+12.3 %', 0.5 → '-50.0 %'; None
    when the ratio is missing or not finite (the caller says how a missing change reads)."""
    if not is_finite_number(ratio):
        return None
    return f"{100 * (float(ratio) - 1):+.1f} %"


_FLOP_UNITS = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))


def format_flops(n: Any) -> str:
    """134217728 → '134.2 MFLOP', 2.5e12 → '2.50 TFLOP' (decimal units, as FLOPs are quoted); '–' when missing."""
    if not is_finite_number(n):
        return MISSING
    x = float(n)
    for scale, unit in _FLOP_UNITS:
        if abs(x) >= scale:
            v = x / scale
            return f"{v:,.2f} {unit}" if abs(v) < 100 else f"{v:,.1f} {unit}"
    return f"{x:,.0f} FLOP"


def format_count(n: Any) -> str:
    """A count with thousands separators below a million, then 1.3 M / 2.1 B: never '1.3B' for
    bytes (those go through format_bytes); '–' when missing."""
    if not is_finite_number(n):
        return MISSING
    x = float(n)
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(x) >= scale:
            return f"{x / scale:,.1f} {unit}"
    return f"{x:,.0f}" if x == int(x) else f"{x:,.4g}"


def format_shape(shapes: Any, width: int = 60) -> str:
    """Input shapes as recorded (``[[32, 3, 224, 224], [64, 3, 7, 7], [], []]``) for people:
    ``32×3×224×224, 64×3×7×7`` (empty entries, non-tensor arguments, left out; ``scalar`` for a
    0-d tensor when it is the only one), cut to ``width`` with "…"; '' when nothing was recorded."""
    text = "" if shapes is None else str(shapes).strip()
    if not text or text in ("[]", "nan", "None"):
        return ""
    if "[" not in text and "(" not in text:  # already flat: "32x4" (the module tree's output_shape)
        dims = text.replace("×", "x").split("x")
        out = "×".join(d.strip() for d in dims) if all(d.strip().isdigit() for d in dims) else text
        return out if len(out) <= width else out[: width - 1] + "…"
    value = _nested_ints(text.replace("(", "[").replace(")", "]"))
    if value is None:
        return text if len(text) <= width else text[: width - 1] + "…"
    parts: list[str] = []

    def one(v: Any) -> str | None:
        if isinstance(v, list) and all(isinstance(d, int) for d in v):
            return "×".join(str(d) for d in v) if v else None
        if isinstance(v, list):
            inner = [p for p in (one(x) for x in v) if p]
            return "(" + ", ".join(inner) + ")" if inner else None
        return None

    if isinstance(value, list) and value and all(isinstance(d, int) for d in value):
        value = [value]  # one shape, not a list of them
    for v in value if isinstance(value, list) else [value]:
        p = one(v)
        if p:
            parts.append(p)
    out = ", ".join(parts) or "scalar"
    return out if len(out) <= width else out[: width - 1] + "…"


def _nested_ints(text: str) -> list[Any] | None:
    """``[[32, 3], [], 5]`` → nested lists (ints, other tokens as text); None when unbalanced."""
    stack: list[list[Any]] = [[]]
    token = ""
    for ch in text + ",":
        if ch in "[], \t\n":  # whitespace too: numpy prints [32  4]
            if token.strip():
                t = token.strip()
                stack[-1].append(int(t) if t.lstrip("-").isdigit() else t)
            token = ""
            if ch == "[":
                stack.append([])
            elif ch == "]":
                if len(stack) < 2:
                    return None
                inner = stack.pop()
                stack[-1].append(inner)
        else:
            token += ch
    if len(stack) != 1:
        return None
    top = stack[0]
    return top[0] if len(top) == 1 and isinstance(top[0], list) else top
