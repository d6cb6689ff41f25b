"""Tests of app.presentation.units: the exact texts of today's helpers, and that it is a leaf."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from app.presentation import units
from app.presentation.units import (
    format_bytes,
    format_ms,
    format_ms_of_us,
    format_percent,
    format_seconds,
    format_us,
)


@pytest.mark.parametrize(("n", "text"), [
    (None, "–"), (float("nan"), "–"), (math.inf, "–"), (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"),
    (1536, "1.5 KiB"), (3 * 1024**2, "3.0 MiB"), (2.5 * 1024**3, "2.5 GiB"), (1024**5, "1024.0 TiB"),
    (-2048, "-2.0 KiB"), (np.float64(1536), "1.5 KiB"), (np.int64(10), "10 B"),
])
def test_format_bytes(n: float | None, text: str) -> None:
    assert format_bytes(n) == text


@pytest.mark.parametrize(("s", "text"), [
    (None, "–"), (float("nan"), "–"), (0.0004, "400 µs"), (0.0123, "12.3 ms"), (2.5, "2.50 s"),
    (59.99, "59.99 s"), (75, "1m 15s"), (3599.6, "1h 00m"), (7300, "2h 01m"),
])
def test_format_seconds(s: float | None, text: str) -> None:
    assert format_seconds(s) == text


def test_milliseconds() -> None:
    assert format_ms(0.0123) == "12.30 ms"
    assert format_ms(1234.5, grouped=True) == "1,234,500.00 ms"
    assert format_ms_of_us(12345.0) == "12.35 ms"
    assert format_ms_of_us(1500) == "1.50 ms"
    assert format_ms_of_us(1234567) == "1234.57 ms"
    assert format_ms_of_us(1234567, grouped=True) == "1,234.57 ms"


def test_format_ms_of_us_divides_once() -> None:
    # The old helpers divided microseconds by 1000 once; going through seconds can round differently.
    assert format_ms_of_us(1005.0) == "1.00 ms"  # format_ms(1005.0 / 1e6) gives '1.01 ms'
    assert format_ms_of_us(4565.0) == "4.57 ms"


@pytest.mark.parametrize(("us", "text"), [
    (float("nan"), "–"), (12.34, "12.3 µs"), (999.9, "999.9 µs"), (1000, "1.00 ms"), (1500, "1.50 ms"),
    (-2500, "-2.50 ms"), (1234567, "1,234.57 ms"),
])
def test_format_us(us: float, text: str) -> None:
    assert format_us(us) == text


def test_format_percent() -> None:
    assert format_percent(0.1234) == "12.3%"
    assert format_percent(1.0) == "100.0%"
    assert format_percent(0) == "0.0%"


def test_units_is_a_leaf() -> None:
    tree = ast.parse(Path(units.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "math", "typing"}, imported


def test_format_change() -> None:
    from app.presentation.units import format_change

    assert format_change(1.123) == "+12.3 %"
    assert format_change(0.5) == "-50.0 %"
    assert format_change(1.0) == "+0.0 %"
    assert format_change(None) is None and format_change(float("nan")) is None
