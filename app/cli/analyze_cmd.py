"""`torchscope analyze PATH`: steps, time breakdown, top ops and kernels, memory peaks (CLI layer).

PATH is a run folder, a run id/name in the store, a trace file, a folder of trace files, or a
torch-tb-profiler log folder (one sub-folder per run): with several runs there, ``--run NAME``
picks one, and without it the command stops and lists them (workers of different runs are never
analysed as one set).
``--json`` prints one document (app.presentation.analyze_json; fields in docs/trace-engine.md);
without it, readable tables. A progress bar with the time left goes to stderr while a large trace
is ingested (a terminal only, unless ``--progress``). A warm ``--json`` prints the document stored
by the last full run (app.workspace.analyze_docs) without importing pandas or the analysis.

For a Torchscope run the document also has ``"run"``: the run's headline step time
(app.workspace.run_summary) and the final value of each logged metric, the
same numbers as ``torchscope ls``, the Run page and Compare. A run without traces prints only
that part (and says so on stderr) instead of failing.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.ingest_options import add_ingest_arguments, ingest_context
from app.cli.process_memory import one_malloc_arena
from app.cli.progress import ProgressBar
from app.errors import UsageError
from app.workspace import refs
from app.workspace.analyze_docs import AnalyzeDocuments
from app.workspace.ingest import parse_cold_head, start_cold_parse

# The analysis, pandas and the presentation modules are imported in the functions that use them:
# a warm `analyze --json` prints its stored document without them (app.workspace.analyze_docs).
if TYPE_CHECKING:
    import pandas as pd

    from app.analysis.trace.summary import TraceAnalysis

HELP = "analyse profiler traces: steps, time breakdown, top ops and kernels, memory peaks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="run folder or id, trace file (.json/.json.gz), or folder of traces")
    parser.add_argument("--rank", type=int, default=None, help="only this rank")
    parser.add_argument("--run", metavar="NAME",
                        help="in a torch-tb-profiler log folder (one sub-folder per run), the run to analyse")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--top", type=int, default=15, help="rows of the op and kernel tables (text output)")
    parser.add_argument("--root", help="run store, to resolve a run id or name")
    parser.add_argument("--no-cache", action="store_true", help="parse the traces again, ignoring the cache")
    parser.add_argument("--progress", action="store_true",
                        help="show reading progress with an ETA on stderr even when it is not a terminal")
    add_ingest_arguments(parser)  # --scheduler (its --progress is the one above)


def _table(df: pd.DataFrame, cols: list[tuple[str, str, Any]]) -> str:
    from app.presentation.text_table import text_table

    rows = [[f(getattr(r, k)) for _, k, f in cols] for r in df.itertuples(index=False)]
    return text_table([h for h, _, _ in cols], rows, numbers_right=True)


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def format_text(analysis: TraceAnalysis, top: int) -> str:
    from app.analysis.trace.steps import DEVICE_CATEGORIES
    from app.presentation.terminal import terminal_text
    from app.presentation.units import format_percent, format_us

    out = []
    for t in analysis.traces:
        out.append(f"trace {t['path']}  rank {t['rank']}  {t['events']:,} events")
        out += [f"  warning: {w}" for w in t["warnings"]]
    st = analysis.steps
    device = has_device_activity(analysis)
    if st.empty:
        out.append("\nno steps found")
    else:
        # A run without device activity gets no all-zero device columns (--json keeps every field).
        shown = [c for c in DEVICE_CATEGORIES if device or c not in _DEVICE_ONLY
                 or (c == "communication" and float(st["communication_us"].fillna(0).sum()) > 0)]  # gloo on CPU
        cols = [("RANK", "rank", str), ("STEP", "step", str), ("DURATION", "duration_us", format_us)]
        cols += [(c.upper().replace("_", " "), f"{c}_us", format_us) for c in shown]
        cols += [(c.upper(), f"{c}_us", format_us) for c in ("forward", "backward", "optimizer")]
        view = "device view as torch-tb-profiler's Overview" if device else "no device activity: host time only"
        out += ["", f"Steps ({view}; training-loop view)", _table(st, cols)]
    ops = analysis.ops.head(top).assign(name=lambda d: d["name"].map(_short))
    if len(ops):
        op_cols: list[tuple[str, str, Any]] = [
            ("OP", "name", str), ("CALLS", "calls", str), ("SELF", "self_us", format_us),
            ("TOTAL", "total_us", format_us)]
        if device:
            op_cols.append(("DEVICE SELF", "device_self_us", format_us))
        op_cols.append(("% OF STEPS", "share", lambda v: format_percent(float(v))))
        out += ["", f"Top {len(ops)} ops by self time", _table(ops, op_cols)]
        capped = _capped_ops(ops)
        if capped:
            out.append(f"  {capped}")
    kern = analysis.kernels.head(top).assign(name=lambda d: d["name"].map(_short))
    if len(kern):
        out += ["", f"Top {len(kern)} kernels by total time", _table(kern, [
            ("KERNEL", "name", str), ("CALLS", "calls", str), ("TOTAL", "total_us", format_us),
            ("MEAN", "mean_us", format_us), ("SHARE", "share", lambda v: f"{v:.1%}")])]
    if len(analysis.rank_skew):
        out += ["", "Ranks per step (slowest vs fastest)", _table(analysis.rank_skew, [
            ("STEP", "step", str), ("RANKS", "ranks", str), ("SLOWEST", "slowest_rank", str),
            ("TIME", "slowest_us", format_us), ("FASTEST", "fastest_rank", str), ("TIME ", "fastest_us", format_us),
            ("SPREAD", "spread_us", format_us)])]
    out += _rank_lines(analysis, top)
    if len(analysis.overlap) and analysis.overlap["communication_us"].sum() > 0:
        out += ["", "Computation / communication overlap", _table(analysis.overlap, [
            ("RANK", "rank", str), ("STEP", "step", str), ("COMPUTE", "computation_us", format_us),
            ("COMMUNICATION", "communication_us", format_us), ("OVERLAP", "overlap_us", format_us),
            ("OTHER", "other_us", format_us)])]
    if analysis.memory:
        out += ["", "Memory peaks"]
        for dev, m in analysis.memory.items():
            out.append(f"  {terminal_text(dev)}: {_peak_text(m)}")
    return "\n".join(out)


def _rank_lines(analysis: TraceAnalysis, top: int) -> list[str]:
    """The per-rank table (highest straggler score first) and the straggler sentence, for ≥ 2 ranks."""
    from app.presentation.ranks_text import RANK_TEXT_HEADERS, rank_text_rows, straggler_sentence
    from app.presentation.text_table import text_table

    rows = analysis.rank_summary
    if len(rows) < 2:
        return []
    shown = rank_text_rows(rows, top)
    out = ["", "Ranks (per step; straggler score 0-1: how often and how late the rank is last to arrive)",
           text_table(RANK_TEXT_HEADERS, shown, numbers_right=True)]
    if len(rows) > len(shown):
        out.append(f"  … {len(rows) - len(shown)} more ranks (--top, or --json for all)")
    sentence = straggler_sentence(rows)
    if sentence:
        out.append(sentence)
    return out


_DEVICE_ONLY = frozenset({"kernel", "memcpy", "memset", "communication", "runtime"})


def has_device_activity(analysis: TraceAnalysis) -> bool:
    """Whether the traces hold device work (kernels, copies, runtime calls): without it the text
    output leaves the device columns out."""
    if len(analysis.kernels):
        return True
    st = analysis.steps
    return any(f"{c}_us" in st.columns and float(st[f"{c}_us"].fillna(0).sum()) > 0
               for c in _DEVICE_ONLY - {"communication"})  # collectives may be host work (gloo)


def _capped_ops(ops: pd.DataFrame) -> str:
    """The note under the op table for rows whose share is capped (summed over threads)."""
    if "threads" not in ops.columns:
        return ""
    capped = ops[(ops["share"] >= 1.0) & (ops["threads"] > 1)]
    if not len(capped):
        return ""
    names = ", ".join(f"{n} ({t} threads)" for n, t in zip(capped["name"], capped["threads"]))
    return (f"note: self time is summed over the threads an op ran on; {names} reached the steps' "
            "duration and show 100 %")


def _peak_text(m: dict[str, Any]) -> str:
    from app.presentation.units import format_bytes

    alloc, reserved = m.get("peak_allocated_bytes"), m.get("peak_reserved_bytes")
    source = m.get("peak_source")
    if source == "unknown" or alloc is None:
        text = "allocated unknown (the trace's memory events carry no totals and no sizes)"
    elif source == "running_sum":
        text = f"allocated {format_bytes(alloc)} (running sum of the trace's allocations; growth over the trace)"
    else:
        text = f"allocated {format_bytes(alloc)}"
    return text + (f", reserved {format_bytes(reserved)}" if reserved is not None else ", reserved unknown")


def format_windows(windows: pd.DataFrame) -> str:
    """The profiler windows of a run: why each was taken, its steps, its median step (× the typical)."""
    import pandas as pd

    from app.presentation.units import format_us

    def ratio(v: Any) -> str:
        return "" if pd.isna(v) else f"{v:.2f}×"
    rows = windows.assign(step_range=[f"{a}–{b}" if a != b else f"{a}" for a, b in
                                      zip(windows["first_step"], windows["last_step"])])
    # each rank records its own windows: with several, a rank column tells their rows apart
    by_rank: list[tuple[str, str, Any]] = (
        [("RANK", "rank", lambda v: "" if pd.isna(v) else str(int(v)))]
        if "rank" in rows.columns and rows["rank"].nunique(dropna=True) > 1 else [])
    if by_rank:
        rows = rows.sort_values("rank", kind="stable", na_position="first")
    out = ["Profiler windows", _table(rows, [
        *by_rank, ("REASON", "label", str), ("STEPS", "step_range", str),
        ("MEDIAN STEP", "median_step_us", lambda v: "" if pd.isna(v) else format_us(v)),
        ("× TYPICAL", "ratio_to_typical", ratio)])]
    if (~windows["typical"]).any() and windows["typical"].any():
        out.append("  breakdown, ops and kernels above: typical windows only (anomaly windows left out)")
    return "\n".join(out)


def format_run_summary(summary: dict[str, Any]) -> str:
    """The run part of the text output: headline step time and final values, labelled by rule."""
    from app.presentation.terminal import MAX_CELL_CHARS, terminal_text
    from app.presentation.units import format_seconds

    out = [f"run {terminal_text(summary['name'], MAX_CELL_CHARS)} ({terminal_text(summary['id'], MAX_CELL_CHARS)})"]
    if summary["step_time_s"] is not None:
        out.append(f"  step time (median, steady state): {format_seconds(summary['step_time_s'])} over "
                   f"{summary['step_time_steps']} steps (dropped: {summary['step_time_dropped']})")
    for fv in summary["final"].values():
        out.append(f"  {fv['label']}: {fv['value']:.4g}")
    return "\n".join(out)


def _print_run_only(summary: dict[str, Any], as_json: bool, why: str) -> int:
    print(f"note: {why}; showing the run's metrics only", file=sys.stderr)
    if as_json:
        json.dump({"run": summary}, sys.stdout, ensure_ascii=False, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(format_run_summary(summary))
    return 0


def _import_analysis() -> None:
    """pandas, the analysis and the presentation modules (~0.35 s)."""
    import app.analysis.trace.windows
    import app.presentation.analyze_json
    import app.workspace.profiled_windows
    import app.workspace.run_summary
    import app.workspace.traces  # noqa: F401


def _import_while_parsing(split: Path | None, bar: ProgressBar) -> None:
    """Import the analysis; with a split trace (``start_cold_parse``), parse this process' part of it
    meanwhile, here, while another thread imports: the C accelerator reads without the GIL, so the
    two overlap (~0.1 s of a cold analyze of 100 MB; benchmarks/README.md, issue 13 wave 17).

    The cyclic GC is paused throughout: it would otherwise walk the objects of every module imported
    so far again and again (~10 % of the imports' CPU). Then those objects (modules, functions,
    classes: they live as long as the process) are frozen out of the GC's generations: else the
    first collection after the pause walks all of them (~30 ms) and the next ones again as they are
    promoted (~25 ms in the analysis)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if split is None:
            _import_analysis()
            return
        importer = threading.Thread(target=_import_analysis, name="torchscope-imports")
        importer.start()
        try:
            parse_cold_head(split, bar)
        finally:
            importer.join()
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def run(args: argparse.Namespace) -> int:
    path = refs.pick_tb_run(refs.resolve_path(args.path, getattr(args, "root", None)), getattr(args, "run", None))
    # A warm `--json` of unchanged traces prints the document stored by the last full run.
    docs = AnalyzeDocuments(path, args.rank) if args.json and not args.no_cache else None
    if docs is not None and (text := docs.read()) is not None:
        sys.stdout.write(text)
        return 0
    if "pyarrow" not in sys.modules:
        # Arrow's default pool (mimalloc) keeps what the ingest and the cache write free, on top of
        # the analysis' peak: the system allocator gives it back (cold analyze at 100 MB: 263-278 MB
        # peak -> 237-240 MB, same CPU; benchmarks/README.md, issue 13 wave 10). Read when pyarrow loads.
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
        # and one malloc arena for every thread: the peak holds no block twice (app.cli.process_memory)
        one_malloc_arena()
    split = None
    if not args.no_cache and getattr(args, "scheduler", None) is None:
        # one big trace the cache lacks: its tail is parsed by a second process from now on, while
        # this one imports pandas and the analysis, then parses the head (app.data.trace_split)
        split = start_cold_parse(path)
    bar = ProgressBar("reading traces", force=getattr(args, "progress", False))
    _import_while_parsing(split, bar)
    from app.analysis.trace.windows import compute_window_table
    from app.presentation.analyze_json import analysis_to_json
    from app.workspace.profiled_windows import analyze_run_traces, read_run_windows
    from app.workspace.run_summary import has_traces, load_run_summary
    from app.workspace.traces import load_trace_set

    summary = load_run_summary(path, args.rank) if path.is_dir() else None
    if summary is not None and not has_traces(path):
        bar.close()
        return _print_run_only(summary, args.json, f"{path} has no profiler traces")
    try:
        with ingest_context(args):  # many rank files: parsed in parallel (local cores or --scheduler)
            traces = load_trace_set(path, progress=bar, use_cache=not args.no_cache)
    finally:
        bar.close()
    if args.rank is not None:
        ranks = sorted({t.rank for t in traces})
        traces = [t for t in traces if t.rank == args.rank]
        if not traces:
            raise UsageError(f"--rank {args.rank}: {path} has traces of ranks {ranks}")
    # Cached traces also cache their analysis next to them (steps, breakdown, op/kernel tables):
    # a second `analyze` of an unchanged trace reads no event.
    windows = tuple(w for w in read_run_windows(path) if args.rank is None or w.rank in (None, args.rank))
    analysis = analyze_run_traces(traces, windows, use_cache=not args.no_cache)
    table = compute_window_table(windows, analysis.steps) if windows else None
    if args.json:
        doc = analysis_to_json(analysis, windows=table)
        if summary is not None:
            doc["run"] = summary
        text = json.dumps(doc, ensure_ascii=False) + "\n"
        sys.stdout.write(text)
        if docs is not None:
            docs.write(traces, text)
    else:
        text = format_text(analysis, args.top)
        if table is not None:
            text += "\n\n" + format_windows(table)
        print(format_run_summary(summary) + "\n\n" + text if summary is not None else text)
    return 0
