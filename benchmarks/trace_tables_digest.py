"""Digest of every table Torchscope ingests from some traces, to check a change keeps them identical.

    .venv/bin/python benchmarks/trace_tables_digest.py OUT.json TRACE [TRACE ...]

Run it once with the old code (e.g. ``git worktree add /tmp/old <commit>`` and that copy of this
script) and once with the new, on the same files, then compare the two JSON files (``cmp``).
For each trace it loads the tables with a fresh cache, then again from that cache, and records a
hash of every DataFrame (column names, dtypes, categories in order, category codes, values,
nulls, index), the metadata, the warnings and the event count.
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd

from app.data.trace import load_trace
from app.data.trace_columns import TABLES


def frame_digest(df: pd.DataFrame) -> str:
    m = hashlib.sha256()
    m.update(repr(list(df.columns)).encode())
    m.update(repr([str(t) for t in df.dtypes]).encode())
    for c in df.columns:
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            m.update(repr(list(s.cat.categories)).encode())
            m.update(s.cat.codes.to_numpy().tobytes())
        else:
            m.update(pd.util.hash_pandas_object(s, index=False).to_numpy().tobytes())
            m.update(repr(int(s.isna().sum())).encode())
    m.update(repr((len(df), list(df.index[:3]), str(df.index.dtype))).encode())
    return m.hexdigest()[:16]


def trace_digest(path: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        fresh = load_trace(path, cache_dir=cache)
        cached = load_trace(path, cache_dir=cache)
        assert not fresh.from_cache and cached.from_cache
        return {
            "tables": {n: frame_digest(getattr(fresh, n)) for n in TABLES},
            "cached": {n: frame_digest(getattr(cached, n)) for n in TABLES},
            "rows": {n: len(getattr(fresh, n)) for n in TABLES},
            "meta": hashlib.sha256(json.dumps(fresh.meta, sort_keys=True, default=str).encode()).hexdigest()[:16],
            "warnings": fresh.warnings,
            "n_events": fresh.n_events,
        }


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    out = {p: trace_digest(p) for p in sys.argv[2:]}
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1, sort_keys=True))
    print(f"{sys.argv[1]}: {len(out)} traces")


if __name__ == "__main__":
    main()
