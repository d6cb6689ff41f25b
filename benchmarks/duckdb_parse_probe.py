"""Probe for issue 13's cold path: can DuckDB's JSON reader parse a trace's events faster than the
engine's msgspec decode + Arrow columns, and at what memory? (benchmark tool, not used by the app)

Each case runs as a process of its own, one after the other, and prints wall seconds and its peak RSS:

- ``engine``: ``app.data.trace_parse.parse_trace_file`` (msgspec decode into typed structs, then the
  Arrow tables: what a cold ``analyze`` pays for the parse in one process);
- ``duckdb``: the events array copied out of the file by the kernel (``os.sendfile``: DuckDB's
  ``read_json`` reads a whole file as one array, and a whole Kineto document as one value took ~13 s),
  then ``read_json(format='array')`` with the fields the engine keeps as typed columns (``args`` a
  STRUCT of the keys the engine reads, ``Input Dims``/``Input type`` as raw JSON) into one Arrow table.

It checks that both saw the same complete (``X``) events and the same summed duration. It does not
reproduce the engine's cleaning (dictionary encoding, lenient fields, warnings, recovery of a cut
file): it measures whether the reader is worth building that on.

    python -m benchmarks.duckdb_parse_probe TRACE.json [--threads 1 2]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The fields the engine keeps (app.data.trace_decode.Event), as DuckDB column types; a Python dict's
# repr is DuckDB's map literal for read_json's ``columns``.
_COLUMNS = {"ph": "VARCHAR", "cat": "VARCHAR", "name": "VARCHAR", "pid": "VARCHAR", "tid": "VARCHAR", "ts": "DOUBLE",
            "dur": "DOUBLE", "id": "VARCHAR",
            "args": 'STRUCT("correlation" BIGINT, "External id" BIGINT, "device" BIGINT, "stream" BIGINT, '
                    '"Input Dims" JSON, "Input type" JSON, "Sequence number" BIGINT, "Fwd thread id" BIGINT)'}


def _events_span(path: Path) -> tuple[int, int]:
    """(offset of the events array's '[', offset just past its ']') in a plain JSON trace."""
    from app.data.trace_envelope import find_start

    with open(path, "rb") as f:
        head = f.read(1 << 20)
        found = find_start(head)
        if found is None:
            raise SystemExit(f"{path}: no events array in its first MiB")
        start = head.rindex(b"[", 0, found[0] + 1)
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
    base = size - len(tail)
    pos = len(tail)
    while (pos := tail.rfind(b"]", 0, pos)) >= 0:
        rest = tail[pos + 1:].strip()
        if not found[1] and not rest:  # a bare array
            return start, base + pos + 1
        if rest == b"}":
            return start, base + pos + 1
        if rest.startswith(b","):
            try:
                json.loads(b"{" + rest[1:])
                return start, base + pos + 1
            except ValueError:
                pass
    raise SystemExit(f"{path}: the end of the events array was not found in its last MiB")


def _duckdb(path: Path, threads: int) -> dict[str, float]:
    t0 = time.perf_counter()
    import duckdb

    t1 = time.perf_counter()
    start, end = _events_span(path)
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile(suffix=".json", dir=folder) as out, open(path, "rb") as src:
        left, off = end - start, start
        while left:
            n = os.sendfile(out.fileno(), src.fileno(), off, left)
            if not n:
                raise SystemExit("sendfile copied nothing")
            off, left = off + n, left - n
        out.flush()
        t2 = time.perf_counter()
        con = duckdb.connect()
        con.execute(f"SET threads TO {threads}")
        table = con.sql(f"SELECT * FROM read_json('{out.name}', format='array', columns={_COLUMNS!r})").to_arrow_table()
        t3 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the check below
    import pyarrow.compute as pc  # after the clock and the peak: the check is not the case's cost

    x = table.filter(pc.equal(table.column("ph"), "X"))
    return {"import_s": t1 - t0, "slice_s": t2 - t1, "read_s": t3 - t2, "total_s": t3 - t0, "peak_rss_mb": peak,
            "x_events": x.num_rows, "x_dur_sum": pc.sum(x.column("dur")).as_py() or 0.0}



def _engine(path: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    from app.data.trace_parse import parse_trace_file

    t1 = time.perf_counter()
    parsed = parse_trace_file(path)
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the check below
    import pyarrow.compute as pc

    events = parsed.events
    assert events is not None
    return {"import_s": t1 - t0, "read_s": t2 - t1, "total_s": t2 - t0, "peak_rss_mb": peak, "x_events": events.num_rows,
            "x_dur_sum": pc.sum(events.column("dur_us")).as_py() or 0.0}


def _child(case: str, path: Path, threads: int) -> None:
    result = _duckdb(path, threads) if case == "duckdb" else _engine(path)
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:
        _child(args.case, args.trace, args.threads[0])
        return 0
    cases = [("engine", 1)] + [("duckdb", t) for t in args.threads]
    for r in range(args.rounds):
        for case, threads in cases:
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "benchmarks.duckdb_parse_probe", str(args.trace), "--case",
                                  case, "--threads", str(threads)], capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t0
            res = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"round {r + 1} {case:6} threads {threads}: process {wall:.2f} s · " +
                  " · ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
