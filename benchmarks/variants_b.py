"""Sample variants of the input pipeline, training dynamics and distribution: record each pair with
the agent, then print the advisor's finding on each side and the diff's figures (docs/variants.md).

    python -m benchmarks.variants_b                   # all four pairs, into a temporary store
    python -m benchmarks.variants_b --only lr_plateau --root runs-variants --keep

Both sides of a pair run at the same time (same contention for both), as in tests/variants. The
figures of a loaded machine are contention: rerun on a quiet one for docs/variants.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from profiler_agent import runformat as rf

ROOT = Path(__file__).resolve().parents[1]

# variant → script, the flags of each side, the `torchscope run` options, the rule it is about,
# and the side commands ("torchrun" runs that side under torchrun with 2 processes).
VARIANTS_B: dict[str, dict[str, Any]] = {
    "dataloader_workers": {
        "script": "sample_models/variants/dataloader_workers.py",
        "problem": ["--workers", "0"], "fixed": ["--workers", "2", "--pin-memory"],
        "agent": ["--no-graph", "--wait", "3", "--warmup", "1", "--active", "4"],
        "rule": "data_loading_bound", "launch": {"problem": "python", "fixed": "python"},
    },
    "gradient_clipping": {
        "script": "sample_models/variants/gradient_clipping.py",
        "problem": ["--clip-grad-norm", "0"], "fixed": ["--clip-grad-norm", "1"],
        "agent": ["--no-graph", "--no-profile", "--grad-norm"],
        "rule": "exploding_gradients", "launch": {"problem": "python", "fixed": "python"},
    },
    "lr_plateau": {
        "script": "sample_models/variants/lr_plateau.py",
        "problem": ["--schedule", "constant"], "fixed": ["--schedule", "plateau"],
        "agent": ["--no-graph", "--no-profile"],
        "rule": "loss_plateau", "launch": {"problem": "python", "fixed": "python"},
    },
    "data_parallel": {
        "script": "sample_models/variants/data_parallel.py",
        "problem": ["--parallel", "dp"], "fixed": ["--parallel", "ddp"],
        "agent": ["--no-graph", "--wait", "1", "--warmup", "1", "--active", "3"],
        "rule": "data_parallel_used", "launch": {"problem": "python", "fixed": "torchrun"},
    },
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")}
    return env | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _program(spec: dict[str, Any], side: str) -> list[str]:
    script = str(ROOT / spec["script"])
    if spec["launch"][side] == "torchrun":
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
        return [torchrun, "--standalone", "--nproc_per_node", "2", script, *spec[side]]
    return [sys.executable, script, *spec[side]]


def record_pair(name: str, spec: dict[str, Any], root: Path) -> dict[str, Path]:
    """Record both sides at once; return side → run folder. Raises RuntimeError on a failed side."""
    procs = {side: subprocess.Popen(
        [sys.executable, "-m", "app", "run", "--root", str(root), "--name", f"{name}-{side}", *spec["agent"],
         "--", *_program(spec, side)], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True) for side in ("problem", "fixed")}
    for side, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        if proc.returncode:
            raise RuntimeError(f"{name} {side} failed ({proc.returncode}): {err[-2000:]}")
    runs = {m.name: path for path, m in rf.list_runs(root).runs}
    return {side: runs[f"{name}-{side}"] for side in ("problem", "fixed")}


def _cli_json(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "app", *args, "--json"], cwd=ROOT, env=_env(),
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout)


def summarise(name: str, spec: dict[str, Any], runs: dict[str, Path]) -> dict[str, Any]:
    """The advisor's finding for the variant's rule on each side and the diff's headline figures."""
    row: dict[str, Any] = {"variant": name, "rule": spec["rule"]}
    for side, run in runs.items():
        doc = _cli_json("advise", str(run))
        found = [f for f in doc["findings"] if f["rule"] == spec["rule"]]
        row[side] = found[0]["severity"] if found else ("silent" if spec["rule"] in doc["checked"] else "skipped")
        row[f"{side}_measure"] = doc["measures"].get(spec["rule"])
    diff = _cli_json("diff", str(runs["problem"]), str(runs["fixed"]))
    row["step_time_ratio"] = diff["headline"]["ratio"]
    row["verdict"] = diff["headline"]["verdict"]
    row["metrics"] = {m["metric"]: [m["baseline_final"], m["candidate_final"]] for m in diff["metrics"]}
    row["dataloader_us"] = {r["category"]: [r["baseline_us"], r["candidate_us"]]
                            for r in diff.get("breakdown_delta") or [] if r["category"] == "dataloader"}
    row["resolved"] = [f["rule"] for f in diff["advice"]["resolved"]]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=sorted(VARIANTS_B), action="append")
    p.add_argument("--root", type=Path, help="store for the runs (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the temporary store")
    args = p.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="variants-b-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        for name in args.only or VARIANTS_B:
            print(json.dumps(summarise(name, VARIANTS_B[name], record_pair(name, VARIANTS_B[name], root))), flush=True)
    finally:
        if args.root is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
