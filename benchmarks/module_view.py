"""Cost of grouping operators by nn.Module (benchmark tool).

    python -m benchmarks.module_view --mb 100 --out benchmarks/results/module_view.json

Takes the real A100 training trace of ../shared/data (gpu_before_after/control.json.gz), adds
``nn.Module: <label>`` ranges the way the agent records them (per profiled step: a ``(model)``
range, one ``layer<k>`` range per four top-level forward ops, one ``layer<k>.<i>`` range around
each top-level forward op: ~1,000 ranges per step), replicates it to ``--mb`` MB with
benchmarks/gen_trace.py, and times on the warm trace cache (best of ``--repeat``):
``compute_op_table`` by name (what the analysis cache computes), by module, and
``compute_module_table``. Peers in the same run: the by-name table is the baseline.
"""
from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

from benchmarks.gen_trace import DEFAULT_SOURCE, generate


def add_module_ranges(source: Path, out: Path) -> int:
    """Write ``source`` with agent-like module ranges added; return how many were added."""
    data = source.read_bytes()
    doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    events = doc["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    steps = sorted((e for e in xs if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    main = steps[0]["tid"]
    ops = sorted((e for e in xs if e.get("tid") == main and e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    added = []

    def rng(label: str, lo: float, hi: float, pid: object) -> dict:
        return {"ph": "X", "cat": "user_annotation", "name": f"nn.Module: {label}", "pid": pid, "tid": main,
                "ts": round(lo, 3), "dur": round(hi - lo, 3), "args": {}}

    for s in steps:
        top, reach = [], -1.0
        for e in ops:  # the step's top-level ops
            if s["ts"] <= e["ts"] < s["ts"] + s["dur"] and e["ts"] >= reach:
                top.append(e)
                reach = e["ts"] + e["dur"]
        fwd = [e for e in top if (e.get("args") or {}).get("Sequence number") is not None
               and e["args"].get("Fwd thread id") == 0]
        if not fwd:
            continue
        added.append(rng("(model)", fwd[0]["ts"] - 0.5, max(e["ts"] + e["dur"] for e in fwd) + 0.5, s["pid"]))
        for k in range(0, len(fwd), 4):
            grp = fwd[k:k + 4]
            added.append(rng(f"layer{k // 4}", grp[0]["ts"] - 0.1, grp[-1]["ts"] + grp[-1]["dur"] + 0.1, s["pid"]))
            added += [rng(f"layer{k // 4}.{i}", e["ts"] - 0.001, e["ts"] + e["dur"] + 0.001, s["pid"])
                      for i, e in enumerate(grp)]
    doc["traceEvents"] = events + added
    out.write_text(json.dumps(doc))
    return len(added)


def _best(fn, repeat: int) -> float:  # noqa: ANN001
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = ap.parse_args()
    from app.analysis.trace.modules import compute_module_table
    from app.analysis.trace.ops import compute_op_table
    from app.data.trace import load_trace

    with tempfile.TemporaryDirectory() as tmp:
        with_ranges = Path(tmp) / "control_modules.json"
        n_ranges = add_module_ranges(DEFAULT_SOURCE, with_ranges)
        big = Path(tmp) / "big.pt.trace.json"
        n_events = generate(with_ranges, big, args.mb)
        trace = load_trace(big, cache_dir=Path(tmp) / "cache")
        trace = load_trace(big, cache_dir=Path(tmp) / "cache")  # warm: columns from the cache
        res = {"mb": args.mb, "events": n_events, "module_ranges_in_source": n_ranges,
               "op_table_by_name_s": _best(lambda: compute_op_table([trace]), args.repeat),
               "op_table_by_module_s": _best(lambda: compute_op_table([trace], group_by="module"), args.repeat),
               "module_table_s": _best(lambda: compute_module_table([trace]), args.repeat),
               "modules": int(len(compute_module_table([trace])))}
    res["by_module_over_by_name"] = res["op_table_by_module_s"] / res["op_table_by_name_s"]
    print(json.dumps(res, indent=2))
    if args.out:
        args.out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
