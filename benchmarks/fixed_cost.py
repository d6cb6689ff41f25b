"""The agent's fixed cost per job: paired whole jobs, plain vs under ``torchscope run`` (benchmark).

    python -m benchmarks.fixed_cost                        # 10 pairs of a 50-step tiny job
    python -m benchmarks.fixed_cost --pairs 10 --steps 150 --json out.json
    python -m benchmarks.fixed_cost --agent-args ""        # the defaults (profiler window, graph)

Each pair runs the same tiny training job (a 32->64->8 MLP on 16 in-memory samples, one CPU
thread) twice: once as ``python job.py`` and once as ``python -m app run --no-profile --no-graph
-- python job.py``; which one goes first alternates between pairs so both see the same
background load. Whole-job wall time is measured from this process (``perf_counter`` around
``subprocess.run``), so it counts the launcher, the bootstrap, the agent's imports, the sampler
and the shutdown. Reported: the median of each side, the median of the per-pair differences
(wrapped - plain, seconds: the fixed cost) and the median per-pair ratio. Target: <= 0.2 s.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

JOB = """\
import sys
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randint(0, 8, (16,))
for _ in range(int(sys.argv[1])):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
"""


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(pairs: int, steps: int, agent_args: list[str]) -> dict[str, object]:
    """Run ``pairs`` alternating plain/wrapped pairs; return the times and their summary."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.py"
        job.write_text(JOB)
        plain = [sys.executable, str(job), str(steps)]
        wrapped = [sys.executable, "-m", "app", "run", "--root", str(Path(tmp) / "runs"), *agent_args,
                   "--", *plain]
        _time(plain, env)  # warm the page cache for torch's files
        _time(wrapped, env)
        plain_s: list[float] = []
        wrapped_s: list[float] = []
        for i in range(pairs):
            order = [(plain, plain_s), (wrapped, wrapped_s)]
            for cmd, out in order if i % 2 == 0 else order[::-1]:
                out.append(_time(cmd, env))
    diffs = [w - p for p, w in zip(plain_s, wrapped_s)]
    ratios = [w / p for p, w in zip(plain_s, wrapped_s)]
    return {
        "pairs": pairs, "steps": steps, "agent_args": agent_args,
        "plain_s": plain_s, "wrapped_s": wrapped_s,
        "plain_median_s": statistics.median(plain_s), "wrapped_median_s": statistics.median(wrapped_s),
        "fixed_cost_median_s": statistics.median(diffs), "ratio_median": statistics.median(ratios),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--agent-args", default="--no-profile --no-graph",
                        help="options given to torchscope run (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    result = measure(args.pairs, args.steps, shlex.split(args.agent_args))
    print(f"{args.pairs} pairs, {args.steps} steps, torchscope run {args.agent_args}")
    print(f"  plain   median {result['plain_median_s']:.3f} s")
    print(f"  wrapped median {result['wrapped_median_s']:.3f} s")
    print(f"  fixed cost (median of wrapped - plain) {result['fixed_cost_median_s']:.3f} s, "
          f"median ratio {result['ratio_median']:.3f}")
    print(f"  load average {result['load_average']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
