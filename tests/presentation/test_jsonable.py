"""Tests of app.presentation.to_jsonable: each of its three modes gives what the helper it replaced gave."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from app.presentation.jsonable import to_jsonable


@pytest.mark.parametrize("missing", [None, float("nan"), math.inf, -math.inf, np.float64("nan"), pd.NaT, pd.NA])
@pytest.mark.parametrize("kw", [{}, {"digits": 3}, {"other": str}], ids=["store", "analyze", "diff"])
def test_missing_is_none(missing: object, kw: dict[str, object]) -> None:
    assert to_jsonable(missing, **kw) is None


@pytest.mark.parametrize("kw", [{}, {"digits": 3}, {"other": str}], ids=["store", "analyze", "diff"])
def test_numpy_scalars_become_python(kw: dict[str, object]) -> None:
    for value, expected, kind in [(np.int64(5), 5, int), (np.uint8(3), 3, int), (np.bool_(True), True, bool),
                                  (np.float32(1.5), 1.5, float), (True, True, bool), (7, 7, int),
                                  (np.str_("y"), "y", str)]:
        out = to_jsonable(value, **kw)
        assert out == expected and type(out) is kind, (value, out)


def test_digits_rounds_floats_only() -> None:
    assert to_jsonable(2.34567, digits=3) == 2.346
    assert to_jsonable(np.float64(2.34567), digits=3) == 2.346
    assert to_jsonable(12345678901, digits=3) == 12345678901
    assert to_jsonable(2.34567) == 2.34567


def test_timestamps() -> None:
    ts = pd.Timestamp("2026-01-01 12:00", tz="UTC")
    assert to_jsonable(ts) == "2026-01-01T12:00:00+00:00"
    assert to_jsonable(ts, other=str) == "2026-01-01 12:00:00+00:00"  # what the diff tables always wrote


def test_other_writes_anything_else_as_text() -> None:
    assert to_jsonable([1, 2], other=str) == "[1, 2]"
    assert to_jsonable(object, other=str) == str(object)


@dataclass(frozen=True)
class _Point:
    x: float
    label: str
    tags: tuple[str, ...]


def test_containers_and_dataclasses_are_cleaned_recursively() -> None:
    value = {"a": (1, np.float64("nan")), np.int64(2): [_Point(np.float32(0.5), "p", ("t",))],
             "arr": np.array([1.0, np.inf])}
    out = to_jsonable(value)
    assert out == {"a": [1, None], "2": [{"x": 0.5, "label": "p", "tags": ["t"]}], "arr": [1.0, None]}
    json.dumps(out, allow_nan=False)  # strict JSON


def test_plain_values_unchanged() -> None:
    assert to_jsonable("x") == "x"
    assert to_jsonable(0) == 0 and to_jsonable(-0.0) == 0.0


def test_jsonable_imports_nothing_from_the_project() -> None:
    import ast
    from pathlib import Path

    from app.presentation import jsonable

    tree = ast.parse(Path(jsonable.__file__).read_text(encoding="utf-8"))
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in modules if m.split(".")[0] in ("app", "profiler_agent")}, modules
