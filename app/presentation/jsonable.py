"""The one JSON cleaner: Python, numpy and pandas values → values ``json.dumps`` writes as
strict JSON (presentation layer; imports nothing from the project).

It replaces three near-copies whose outputs it keeps, each through its keywords:

- ``to_jsonable(v)`` is ``app.data.runs._json_value`` (store rows: ISO timestamps, NaN → null);
- ``to_jsonable(v, digits=3)`` is ``app.analysis.trace.summary._clean`` (analyze tables,
  floats rounded to 3 decimals);
- ``to_jsonable(v, other=str)`` is ``app.presentation.compare_json._cell`` (diff tables: any
  value that is not a number, a bool or a string is written as its text).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["to_jsonable"]

_JSON_KEY = (str, int, float, bool)


def to_jsonable(value: Any, *, digits: int | None = None, other: Callable[[Any], Any] | None = None) -> Any:
    """``value`` as plain JSON data: None, bool, int, float, str, list or dict.

    - None, NaN, ±inf, ``pd.NaT`` and ``pd.NA`` → None;
    - numpy scalars → the Python bool, int or float;
    - floats rounded to ``digits`` decimals when it is given;
    - with ``other`` given, every other value (timestamps, containers, objects) → ``other(value)``;
    - without it: ``pd.Timestamp``/``datetime`` → ISO 8601 text, tuples, lists, sets and arrays → lists,
      mappings → dicts, dataclasses → dicts of their fields (all cleaned the same way, recursively),
      anything else unchanged.

    ``Any`` in and out: this is the boundary where typed values become untyped JSON data.
    """
    if value is None or value is pd.NaT or value is pd.NA:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str):
        return str(value)  # np.str_ too
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _float(float(value), digits)
    if other is not None:
        return other(value)
    return _structured(value, digits)


def _float(f: float, digits: int | None) -> float | None:
    if not math.isfinite(f):
        return None
    return f if digits is None else round(f, digits)


def _structured(value: Any, digits: int | None) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):  # pd.Timestamp is a datetime
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name), digits=digits) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {_key(k): to_jsonable(v, digits=digits) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v, digits=digits) for v in value]
    if hasattr(value, "item") and callable(value.item):  # other numpy scalars (datetime64, complex, …)
        return to_jsonable(value.item(), digits=digits)
    try:
        if bool(pd.isna(value)):
            return None
    except (TypeError, ValueError):
        pass
    return value


def _key(key: Any) -> Any:
    if key is None or isinstance(key, _JSON_KEY):
        return key
    return str(key)
