"""The names of a trace's tables and the progress callback's type (data layer; stdlib only).

Kept apart from ``trace_columns`` (which needs pyarrow) so that opening a cached trace, and a warm
``torchscope analyze``, import neither pyarrow nor pandas.
"""
from __future__ import annotations

from collections.abc import Callable

__all__ = ["TABLES", "Progress"]

# The tables of one trace, by name: the parser's output, the cache's files, TraceTables' attributes
# (their schemas: trace_columns.TABLE_SCHEMAS, in this order).
TABLES: tuple[str, ...] = ("events", "memory", "flows", "counters", "threads")

# progress(done_bytes, total_bytes): called as a trace file is read (compressed bytes for a .gz).
Progress = Callable[[int, int], None]
