"""Numbers with units for people: bytes, durations, percentages (presentation layer; a leaf).

This module imports nothing from the project, so any layer may use it for the numbers in
its texts (the advisor does, for its findings). Each function is the one copy of a helper
that used to live in several places; the outputs are kept byte for byte:

- ``format_bytes`` / ``format_seconds`` were ``app.data.runs.format_bytes`` / ``format_seconds``;
- ``format_ms_of_us`` was ``advisor.common.fmt_ms`` (and, with ``grouped=True``,
  ``trace.step_window._fmt_ms``);
- ``format_us`` was ``cli.analyze_cmd._fmt_us``;
- ``format_percent`` was ``advisor.common.fmt_pct``.

Missing values (None, NaN, ±inf) print as an en dash where the old helper did so.
"""
from __future__ import annotations

import math

__all__ = [
    "MISSING",
    "format_bytes",
    "format_ms",
    "format_ms_of_us",
    "format_percent",
    "format_seconds",
    "format_us",
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
