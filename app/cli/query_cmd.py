"""`torchscope query`: headline numbers across the runs of a store, grouped by config keys, with DuckDB (CLI layer).

    torchscope query --by batch_size,num_workers              # median step time, throughput, memory, loss
    torchscope query --by lr --stat mean --where tag=sweep     # only some runs
    torchscope query --sql 'SELECT name, step_time_s FROM runs ORDER BY step_time_s LIMIT 5'

The table ``runs`` has one row per run of the catalog index (columns in docs/catalog.md):
``step_time_s`` is each run's headline step time (the same number as ``ls`` and the Run page), so
``--by`` gives e.g. the median over runs of their median step times. ``--json`` prints
``{"root", "query", "columns", "rows"}``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from app.presentation.jsonable import to_jsonable
from app.presentation.text_table import text_table
from app.presentation.units import format_bytes, format_seconds
from app.workspace import catalog_query
from profiler_agent.runformat import layout

HELP = "query the runs of a store: median step time, throughput, memory and final loss by config keys (DuckDB)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", help=f"run store folder (default ${layout.ROOT_ENV} or ./{layout.DEFAULT_ROOT})")
    parser.add_argument("--by", default="", metavar="KEYS",
                        help="comma-separated config keys to group by (e.g. batch_size,num_workers)")
    parser.add_argument("--metric", action="append", default=None, metavar="NAME",
                        help=f"what to aggregate (repeatable; default {', '.join(catalog_query.QUERY_METRICS)}; "
                             "final.KEY for a logged outcome)")
    parser.add_argument("--stat", default="median", choices=catalog_query.QUERY_STATS,
                        help="statistic over the runs of a group (default median)")
    parser.add_argument("--where", default="", metavar="SELECTOR",
                        help="only these runs, e.g. 'tag=main,status=finished,last=50' (docs/catalog.md)")
    parser.add_argument("--sql", default=None, help="any DuckDB SQL over the table runs instead of --by")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _cell(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if column in ("step_time_s", "duration_s") and isinstance(value, (int, float)):
        return format_seconds(float(value))
    if column == "peak_memory_bytes" and isinstance(value, (int, float)):
        return format_bytes(float(value))
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def run(args: argparse.Namespace) -> int:
    selector = catalog_query.parse_selector(args.where, option="--where") if args.where else None
    table = catalog_query.load_runs_table(args.root, selector=selector)
    by = [k.strip() for k in args.by.split(",") if k.strip()]
    metrics = tuple(args.metric) if args.metric else catalog_query.QUERY_METRICS
    result = catalog_query.query_runs(table, by=by, metrics=metrics, stat=args.stat, sql=args.sql)
    columns = [str(c) for c in result.columns]
    rows = [[to_jsonable(v) for v in r] for r in result.itertuples(index=False, name=None)]
    if args.json:
        doc = {"root": str(layout.resolve_root(args.root)), "query": {"by": by, "metrics": list(metrics),
                                                                      "stat": args.stat, "where": args.where,
                                                                      "sql": args.sql},
               "columns": columns, "rows": [dict(zip(columns, r, strict=True)) for r in rows]}
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
        return 0
    if not rows:
        print(f"no runs matched in {layout.resolve_root(args.root)}")
        return 0
    header = [c.upper() for c in columns]
    print(text_table(header, [[_cell(c, v) for c, v in zip(columns, r, strict=True)] for r in rows],
                     rule=False, strip=True))
    if args.sql is None:
        print(f"{args.stat} over the runs of each group; STEP_TIME_S is each run's headline step time "
              "(steady-state median, as `torchscope ls`)", file=sys.stderr)
    return 0
