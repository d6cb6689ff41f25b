"""Benchmark: record each sample variant's pair (problem on, off) at realistic sizes and print the table.

    python -m benchmarks.variants                                  # all eight pairs
    python -m benchmarks.variants --only a                         # a group (a: precision, memory, optimizer step)
    python -m benchmarks.variants --only dataloader_workers data_parallel --repeat 2
    python -m benchmarks.variants --only b --root runs-variants --json

Each side is ``torchscope run <agent options> -- python SCRIPT <flags>`` recorded by the real agent
(the DDP side of ``data_parallel``: ``-- torchrun --standalone --nproc_per_node 2 SCRIPT ...``, gloo),
``--repeat`` times, with each job's CPU time (user+sys of the launcher and everything it waited
for, from ``os.wait4``). Group ``a`` records the sides one after the other (A B A B); group ``b``
records both sides at once (the same contention for both), as tests/variants does. Then
``torchscope advise`` on both sides for the variant's rule and ``torchscope diff problem fixed
--json`` on the last pair, for the table's figures. Times on a shared machine are noise unless the
ratio is large: compare CPU seconds, call counts and bytes, and rerun on a quiet machine for the
step times (docs/variants.md).

To add a variant, add an entry to ``VARIANTS`` (plain data).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SIDES = ("problem", "fixed")
_A_AGENT = ["--no-graph", "--wait", "2", "--warmup", "1", "--active", "5"]

# name → group (what --only selects besides the name), script (from the project root), problem and
# fixed (each side's flags), args (both sides, the benchmark's sizes), steps (``--steps N`` per
# side; ``--steps`` on the command line replaces it; absent where the script's own count is the
# evidence), agent (the ``torchscope run`` options), rule (the finding of the problem side), ops
# (whose calls per profiled step the table shows), command (side → "torchrun" to run that side
# under ``torchrun --standalone --nproc_per_node 2``; otherwise ``python``).
VARIANTS: dict[str, dict[str, Any]] = {
    "mixed_precision": {"group": "a", "script": "sample_models/variants/mixed_precision.py",
                        "problem": ["--problem"], "fixed": ["--fixed"], "steps": 20, "agent": _A_AGENT,
                        "rule": "cpu_mixed_precision", "args": ["--width", "512", "--batch-size", "256"],
                        "ops": ["aten::mm", "aten::_to_copy"]},
    "checkpointing": {"group": "a", "script": "sample_models/variants/checkpointing.py",
                      "problem": ["--problem"], "fixed": ["--fixed"], "steps": 20, "agent": _A_AGENT,
                      "rule": "activation_memory", "args": ["--width", "128", "--depth", "16", "--batch-size", "1024"],
                      "ops": ["aten::linear"]},
    "inplace": {"group": "a", "script": "sample_models/variants/inplace.py",
                "problem": ["--problem"], "fixed": ["--fixed"], "steps": 20, "agent": _A_AGENT,
                "rule": "inplace_activations", "args": ["--width", "32", "--depth", "6", "--image-size", "64"],
                "ops": ["aten::relu", "aten::relu_"]},
    "zero_grad": {"group": "a", "script": "sample_models/variants/zero_grad.py",
                  "problem": ["--problem"], "fixed": ["--fixed"], "steps": 20, "agent": _A_AGENT,
                  "rule": "zero_grad_set_to_none", "args": ["--width", "512", "--depth", "16"],
                  "ops": ["aten::zero_"]},
    "dataloader_workers": {"group": "b", "script": "sample_models/variants/dataloader_workers.py",
                           "problem": ["--workers", "0"], "fixed": ["--workers", "2", "--pin-memory"], "args": [],
                           "agent": ["--no-graph", "--wait", "3", "--warmup", "1", "--active", "4"],
                           "rule": "data_loading_bound", "ops": []},
    "gradient_clipping": {"group": "b", "script": "sample_models/variants/gradient_clipping.py",
                          "problem": ["--clip-grad-norm", "0"], "fixed": ["--clip-grad-norm", "1"], "args": [],
                          "agent": ["--no-graph", "--no-profile", "--grad-norm"], "rule": "exploding_gradients",
                          "ops": []},
    "lr_plateau": {"group": "b", "script": "sample_models/variants/lr_plateau.py",
                   "problem": ["--schedule", "constant"], "fixed": ["--schedule", "plateau"], "args": [],
                   "agent": ["--no-graph", "--no-profile"], "rule": "loss_plateau", "ops": []},
    # The same model, data and global batch (1024) on both sides; large enough that the
    # computation, not gloo's all-reduce of the 85k parameters, fills a step.
    "data_parallel": {"group": "b", "script": "sample_models/variants/data_parallel.py",
                      "problem": ["--parallel", "dp"], "fixed": ["--parallel", "ddp"], "steps": 20,
                      "args": ["--batch-size", "1024"],
                      "agent": ["--no-graph", "--wait", "2", "--warmup", "1", "--active", "5"],
                      "rule": "data_parallel_used", "ops": ["gloo:all_reduce"], "command": {"fixed": "torchrun"}},
}


def _env() -> dict[str, str]:
    # The runs go to the benchmark's store whatever the user's TORCHSCOPE_* say; one intra-op
    # thread per job (the scripts set it too), so that both sides get the same share of the cores.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")}
    return env | {"PYTHONPATH": str(PROJECT_ROOT), "OMP_NUM_THREADS": "1"}


def _program(spec: dict[str, Any], side: str, steps: int | None) -> list[str]:
    script = str(PROJECT_ROOT / spec["script"])
    flags = [*spec[side], *spec["args"], *(["--steps", str(steps)] if steps else [])]
    if spec.get("command", {}).get(side) == "torchrun":
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
        return [torchrun, "--standalone", "--nproc_per_node", "2", script, *flags]
    return [sys.executable, script, *flags]


def record(root: Path, name: str, spec: dict[str, Any], sides: tuple[str, ...], steps: int | None,
           log: Path) -> dict[str, tuple[Path, float]]:
    """Record ``sides`` of one variant at the same time; side → (run folder, the job's CPU seconds).

    The CPU seconds are ``os.wait4``'s user+sys of that side's ``torchscope run`` process, which
    include the job and every process it waited for (torchrun's ranks, DataLoader workers)."""
    procs = {}
    for side in sides:
        cmd = [sys.executable, "-m", "app", "run", "--root", str(root), "--name", f"{name}-{side}", *spec["agent"],
               "--", *_program(spec, side, steps)]
        err = open(log / f"{name}-{side}.stderr", "w", encoding="utf-8")  # noqa: SIM115 - closed below
        procs[side] = (subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=err), err)
    cpu: dict[str, float] = {}
    for side, (proc, err) in procs.items():
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.close()
        cpu[side] = usage.ru_utime + usage.ru_stime
        if proc.returncode:
            tail = (log / f"{name}-{side}.stderr").read_text(encoding="utf-8", errors="replace")[-2000:]
            raise SystemExit(f"{name}-{side} failed ({proc.returncode}):\n{tail}")
    from profiler_agent.runformat import list_runs

    out = {}
    for side in sides:
        runs = sorted((p for p, m in list_runs(root).runs if m.name == f"{name}-{side}"), key=lambda p: p.name)
        out[side] = (runs[-1], cpu[side])
    return out


def _cli_json(argv: list[str]) -> dict[str, Any]:
    """``torchscope <argv> --json``, in this process."""
    from app.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        main([*argv, "--json"])
    doc: dict[str, Any] = json.loads(out.getvalue())
    return doc


def measure(name: str, spec: dict[str, Any], steps: int | None, repeat: int, root: Path, log: Path) -> dict[str, Any]:
    """Record ``repeat`` pairs of one variant; the table's figures from the last pair, CPU seconds as medians."""
    cpu: dict[str, list[float]] = {s: [] for s in SIDES}
    runs: dict[str, Path] = {}
    steps = steps if "steps" in spec else None
    for _ in range(repeat):
        batches = [SIDES] if spec["group"] == "b" else [(s,) for s in SIDES]  # b: both at once; a: A then B
        for sides in batches:
            for side, (run, c) in record(root, name, spec, sides, steps, log).items():
                runs[side] = run
                cpu[side].append(c)
    row: dict[str, Any] = {"variant": name, "group": spec["group"], "rule": spec["rule"]}
    for side in SIDES:
        doc = _cli_json(["advise", str(runs[side]), "--rule", spec["rule"]])
        found = [f for f in doc["findings"] if f["rule"] == spec["rule"]]
        row[side] = found[0]["severity"] if found else ("silent" if spec["rule"] in doc["checked"] else "skipped")
        row[f"{side}_measure"] = doc["measures"].get(spec["rule"])
    diff = _cli_json(["diff", str(runs["problem"]), str(runs["fixed"])])
    ops = {r["name"]: (r["baseline_calls"], r["candidate_calls"]) for r in diff["ops"]}
    trace = diff.get("trace_step") or {}
    return row | {
        "cpu_s": {s: statistics.median(v) for s, v in cpu.items()},
        "step_time_ratio": diff["headline"]["ratio"], "verdict": diff["headline"]["verdict"],
        "step_ms": (trace.get("baseline_us", 0) / 1000, trace.get("candidate_us", 0) / 1000) if trace else None,
        "peak_mb": ((diff["peak_memory"]["baseline_bytes"] or 0) / 1e6, (diff["peak_memory"]["candidate_bytes"] or 0) / 1e6)
        if diff.get("peak_memory") else None,
        "ops": {op: ops.get(op, (0.0, 0.0)) for op in spec["ops"]},
        "breakdown_us": {r["category"]: (r["baseline_us"], r["candidate_us"]) for r in diff.get("breakdown_delta") or []
                         if r["category"] in ("dataloader", "communication") and (r["baseline_us"] or r["candidate_us"])},
        "metrics": {m["metric"]: (m["baseline_final"], m["candidate_final"]) for m in diff["metrics"]},
        "resolved": [f["rule"] for f in diff["advice"]["resolved"]],
    }


def _pair(a: float | None, b: float | None, digits: int = 1) -> str:
    if a is None or b is None:
        return "?"
    ratio = f" ({b / a:.2f}×)" if a else ""
    return f"{a:.{digits}f} → {b:.{digits}f}{ratio}"


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of docs/variants.md's measured figures (``--json`` has every field)."""
    lines = ["| variant | rule | problem / fixed | job CPU s | step time ratio | profiled step ms | peak MB | "
             "calls per step, breakdown µs |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        detail = [f"`{op}` {a:g} → {b:g}" for op, (a, b) in r["ops"].items()]
        detail += [f"{cat} {a:.0f} → {b:.0f}" for cat, (a, b) in r["breakdown_us"].items()]
        lines.append(f"| {r['variant']} | `{r['rule']}` | {r['problem']} / {r['fixed']} | "
                     f"{_pair(r['cpu_s']['problem'], r['cpu_s']['fixed'])} | {r['step_time_ratio']:.2f}× {r['verdict']} | "
                     f"{_pair(*r['step_ms']) if r['step_ms'] else '-'} | "
                     f"{_pair(*r['peak_mb'], digits=2) if r['peak_mb'] else '-'} | {'; '.join(detail) or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--only", nargs="+", action="extend", metavar="NAME",
                   help=f"groups (a, b) or variants ({', '.join(VARIANTS)}); default: all")
    p.add_argument("--steps", type=int, help="optimizer steps per run where the entry has a count (default: its own)")
    p.add_argument("--repeat", type=int, default=1, help="pairs per variant (CPU seconds: their median)")
    p.add_argument("--root", help="run store to keep the runs in (default: a temporary folder)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    args = p.parse_args(argv)
    only = set(args.only or ())
    unknown = only - set(VARIANTS) - {s["group"] for s in VARIANTS.values()}
    if unknown:
        raise SystemExit(f"--only {' '.join(sorted(unknown))}: no such group or variant "
                         f"(groups: a, b; variants: {', '.join(VARIANTS)})")
    chosen = {n: s for n, s in VARIANTS.items() if not only or n in only or s["group"] in only}
    with tempfile.TemporaryDirectory(prefix="variants-") as tmp:
        root = Path(args.root) if args.root else Path(tmp) / "runs"
        root.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("TORCHSCOPE_CACHE", str(Path(tmp) / "trace-cache"))
        rows = []
        for name, spec in chosen.items():
            rows.append(measure(name, spec, args.steps or spec.get("steps"), args.repeat, root, Path(tmp)))
            print(json.dumps(rows[-1]) if args.json else f"{name}: recorded", file=sys.stdout if args.json else sys.stderr,
                  flush=True)
        if not args.json:
            print(table(rows))


if __name__ == "__main__":
    main()
