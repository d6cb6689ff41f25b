"""Benchmark: record each sample variant's pair (problem on, off) at realistic sizes and print the table.

    python -m benchmarks.variants                 # every variant
    python -m benchmarks.variants --only a        # one group (a: precision, memory, optimizer step)
    python -m benchmarks.variants --only a --repeat 2 --steps 20

Each side is ``torchscope run --no-graph -- python SCRIPT --problem|--fixed`` recorded by the real
agent, A B A B (``--repeat`` pairs), with the job's CPU time (getrusage of the child processes,
user+sys) next to the trace's profiled step time; then ``torchscope advise`` for the variant's rule
on both sides and ``torchscope diff problem fixed --json`` for the peak memory and the op calls.
Times on a shared machine are noise unless the ratio is large: compare CPU seconds, call counts
and bytes, and rerun on a quiet machine for the step times (docs/variants.md).

To add variants, add entries to ``VARIANTS`` (plain data; ``group`` is what ``--only`` selects).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# name → script (from the project root), rule (the finding on the problem side), args (both sides,
# the benchmark's sizes), ops (whose calls per step the table shows), group (for --only).
VARIANTS: dict[str, dict[str, Any]] = {
    "mixed_precision": {"group": "a", "script": "sample_models/variants/mixed_precision.py",
                        "rule": "cpu_mixed_precision", "args": ["--width", "512", "--batch-size", "256"],
                        "ops": ["aten::mm", "aten::_to_copy"]},
    "checkpointing": {"group": "a", "script": "sample_models/variants/checkpointing.py",
                      "rule": "activation_memory", "args": ["--width", "128", "--depth", "16", "--batch-size", "1024"],
                      "ops": ["aten::linear"]},
    "inplace": {"group": "a", "script": "sample_models/variants/inplace.py",
                "rule": "inplace_activations", "args": ["--width", "32", "--depth", "6", "--image-size", "64"],
                "ops": ["aten::relu", "aten::relu_"]},
    "zero_grad": {"group": "a", "script": "sample_models/variants/zero_grad.py",
                  "rule": "zero_grad_set_to_none", "args": ["--width", "512", "--depth", "16"],
                  "ops": ["aten::zero_"]},
}
SIDES = ("problem", "fixed")


def _child_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def record(root: Path, name: str, side: str, spec: dict[str, Any], steps: int) -> tuple[Path, float]:
    """One side recorded by ``torchscope run``; returns (run folder, the job's CPU seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")} | {"PYTHONPATH": str(PROJECT_ROOT)}
    run_name = f"{name}-{side}"
    cmd = [sys.executable, "-m", "app", "run", "--root", str(root), "--name", run_name, "--no-graph",
           "--wait", "2", "--warmup", "1", "--active", "5", "--",
           sys.executable, str(PROJECT_ROOT / spec["script"]), f"--{side}", "--steps", str(steps), *spec["args"]]
    before = _child_cpu_s()
    proc = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=1800)
    cpu = _child_cpu_s() - before
    if proc.returncode != 0:
        raise SystemExit(f"{run_name} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    from profiler_agent.runformat import list_runs

    runs = sorted((p for p, m in list_runs(root).runs if m.name == run_name), key=lambda p: p.name)
    return runs[-1], cpu


def _cli_json(argv: list[str]) -> dict[str, Any]:
    from app.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        main(argv)
    return json.loads(out.getvalue())


def measure(name: str, spec: dict[str, Any], steps: int, repeat: int, root: Path) -> dict[str, Any]:
    """Record ``repeat`` A B pairs of one variant; the table's numbers from the last pair and the CPU medians."""
    cpu: dict[str, list[float]] = {s: [] for s in SIDES}
    runs: dict[str, Path] = {}
    for _ in range(repeat):
        for side in SIDES:
            runs[side], c = record(root, name, side, spec, steps)
            cpu[side].append(c)
    fired = {side: [f["rule"] for f in _cli_json(["advise", str(runs[side]), "--json", "--rule", spec["rule"]])["findings"]]
             for side in SIDES}
    diff = _cli_json(["diff", str(runs["problem"]), str(runs["fixed"]), "--json"])
    ops = {r["name"]: (r["baseline_calls"], r["candidate_calls"]) for r in diff["ops"]}
    return {
        "variant": name, "rule": spec["rule"],
        "fires_problem": spec["rule"] in fired["problem"], "fires_fixed": spec["rule"] in fired["fixed"],
        "cpu_s": {s: statistics.median(v) for s, v in cpu.items()},
        "step_ms": (diff["trace_step"]["baseline_us"] / 1000, diff["trace_step"]["candidate_us"] / 1000),
        "peak_mb": (diff["peak_memory"]["baseline_bytes"] / 1e6, diff["peak_memory"]["candidate_bytes"] / 1e6),
        "ops": {op: ops.get(op, (0.0, 0.0)) for op in spec["ops"]},
    }


def _pair(a: float | None, b: float | None, digits: int = 1) -> str:
    if a is None or b is None:
        return "?"
    ratio = f" ({b / a:.2f}×)" if a else ""
    return f"{a:.{digits}f} → {b:.{digits}f}{ratio}"


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of docs/variants.md's measured columns."""
    lines = ["| variant | rule | fires problem / fixed | job CPU s | profiled step ms | peak MB | op calls per step |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ops = "; ".join(f"`{op}` {a:g} → {b:g}" for op, (a, b) in r["ops"].items())
        lines.append(f"| {r['variant']} | `{r['rule']}` | {'yes' if r['fires_problem'] else 'no'} / "
                     f"{'yes' if r['fires_fixed'] else 'no'} | {_pair(r['cpu_s']['problem'], r['cpu_s']['fixed'])} | "
                     f"{_pair(*r['step_ms'])} | {_pair(*r['peak_mb'], digits=2)} | {ops} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="a group (a, b, ...) or a variant name")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per run (at least 9)")
    p.add_argument("--repeat", type=int, default=1, help="A B pairs per variant (CPU seconds: their median)")
    p.add_argument("--root", help="run store to keep the runs in (default: a temporary folder)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    args = p.parse_args(argv)
    chosen = {n: s for n, s in VARIANTS.items() if args.only in (None, n, s.get("group"))}
    if not chosen:
        raise SystemExit(f"--only {args.only!r}: no such group or variant (variants: {', '.join(VARIANTS)})")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root) if args.root else Path(tmp)
        os.environ.setdefault("TORCHSCOPE_CACHE", str(root / ".trace-cache"))
        rows = [measure(n, s, args.steps, args.repeat, root) for n, s in chosen.items()]
        print(json.dumps(rows, indent=1) if args.json else table(rows))


if __name__ == "__main__":
    main()
