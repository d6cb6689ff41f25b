"""A one-entry memo keyed by an events table (analysis layer, pure).

One analysis asks for the same derived arrays of the same events table from several places (the
step table, the op table's window, the overlap, the collectives). ``last_table`` remembers what a
function returned for the last table it was given, per value of its other arguments. The table is
held by a weak reference: an analysis' tables are not changed once made, and a table that is gone
is never matched. What is handed out is shared by every caller, so the functions make their arrays
read-only.
"""
from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import pandas as pd

__all__ = ["last_table"]

P = ParamSpec("P")
R = TypeVar("R")


def last_table(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate ``fn(table, ...)`` so that the results for the last ``table`` are reused (per the
    other arguments, defaults filled in, so ``f(t)`` and ``f(t, by_name=True)`` are one entry)."""
    signature = inspect.signature(fn)
    last: tuple[weakref.ref[pd.DataFrame], dict[tuple[Any, ...], Any]] | None = None

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        nonlocal last
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        table, *rest = bound.arguments.values()
        memo = last
        if memo is None or memo[0]() is not table:
            memo = last = (weakref.ref(table), {})
        key = tuple(rest)
        if key not in memo[1]:
            memo[1][key] = fn(*args, **kwargs)
        result: R = memo[1][key]
        return result

    return wrapper
