"""The agent's fixed cost per job: paired whole jobs, plain vs under ``torchscope run`` (benchmark).

    python -m benchmarks.fixed_cost                        # 10 pairs of a 50-step tiny job
    python -m benchmarks.fixed_cost --pairs 10 --steps 150 --json out.json
    python -m benchmarks.fixed_cost --agent-args ""        # the defaults (profiler window, graph)
    python -m benchmarks.fixed_cost --also /tmp/old-checkout  # a second wrapped side: another checkout's agent
    python -m benchmarks.fixed_cost --components --also /tmp/old-checkout --pairs 10  # the parts changed, alone
    python -m benchmarks.fixed_cost --imports --also /tmp/old-checkout --pairs 9  # import CPU, in-process

Each pair runs the same tiny training job (a 32->64->8 MLP on 16 in-memory samples, one CPU
thread) twice: once as ``python job.py`` and once as ``python -m app run --no-profile --no-graph
-- python job.py``; which one goes first alternates between pairs so both see the same
background load. Whole-job wall time is measured from this process (``perf_counter`` around
``subprocess.run``), so it counts the launcher, the bootstrap, the agent's imports, the sampler
and the shutdown. Reported: the median of each side, the median of the per-pair differences
(wrapped - plain, seconds: the fixed cost) and the median per-pair ratio, for wall time and
for CPU time (user + system of the whole process tree, from ``os.wait4``; far less sensitive to
other jobs on a shared machine). Target: <= 0.2 s. ``--also DIR`` adds a third side in each
round, the same job wrapped by the checkout in DIR (e.g. ``git archive`` of an older commit), so
before/after figures share the machine's load.

Python's bytecode cache is allowed (``PYTHONDONTWRITEBYTECODE`` is removed for the jobs) as in a
normal install; the first, untimed round writes the caches.
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


def _time(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    # cwd = the checkout on PYTHONPATH: `python -m app` puts the working directory first on sys.path.
    """(wall seconds, CPU seconds of the process and its reaped descendants) of one run of ``cmd``."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=env["PYTHONPATH"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited with {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def _env(home: Path, bytecode_cache: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")}
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = str(home)
    return env


def _summary(plain: list[tuple[float, float]], wrapped: list[tuple[float, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, what in enumerate(("wall", "cpu")):
        p, w = [x[k] for x in plain], [x[k] for x in wrapped]
        out[f"plain_{what}_median_s"] = statistics.median(p)
        out[f"wrapped_{what}_median_s"] = statistics.median(w)
        out[f"fixed_cost_{what}_median_s"] = statistics.median(b - a for a, b in zip(p, w))
        out[f"ratio_{what}_median"] = statistics.median(b / a for a, b in zip(p, w))
        # The quietest run of each side: on a shared machine the least disturbed estimate.
        out[f"plain_{what}_min_s"] = min(p)
        out[f"wrapped_{what}_min_s"] = min(w)
        out[f"fixed_cost_{what}_of_mins_s"] = min(w) - min(p)
    return out


def measure(pairs: int, steps: int, agent_args: list[str], also: Path | None = None, *,
            trivial: bool = False, bytecode_cache: bool = True) -> dict[str, object]:
    """Run ``pairs`` rounds of plain and wrapped jobs (order rotating); return the times and their summary."""
    homes = {"wrapped": ROOT, **({"also": also.resolve()} if also is not None else {})}
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.py"
        job.write_text("" if trivial else JOB)  # trivial: the launcher and bootstrap alone, no torch
        plain = [sys.executable, str(job), str(steps)]
        sides = {"plain": (plain, _env(ROOT, bytecode_cache))}
        for name, home in homes.items():
            sides[name] = ([sys.executable, "-m", "app", "run", "--root", str(Path(tmp) / name), *agent_args,
                            "--", *plain], _env(home, bytecode_cache))
        for cmd, env in sides.values():  # warm the page cache and write the bytecode caches
            _time(cmd, env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        names = list(sides)
        for i in range(pairs):
            for name in names[i % len(names):] + names[: i % len(names)]:
                times[name].append(_time(*sides[name]))
    result: dict[str, object] = {"pairs": pairs, "steps": steps, "agent_args": agent_args, "trivial": trivial,
                                 "bytecode_cache": bytecode_cache,
                                 "times_s": {name: [list(t) for t in ts] for name, ts in times.items()},
                                 "load_average": os.getloadavg()}
    result["wrapped"] = _summary(times["plain"], times["wrapped"])
    if also is not None:
        result["also"] = {"home": str(also), **_summary(times["plain"], times["also"])}
    return result


# Parts of the fixed cost changed in issue 11's second round: (set-up, {side: the part}); each
# side runs in its own checkout, the set-up alone is subtracted from set-up + part.
COMPONENTS: dict[str, tuple[str, dict[str, str]]] = {
    "describe_launch (launcher thread: git, versions)": (
        "import profiler_agent.environment as e",
        {"after": "import profiler_agent.environment as e; e.describe_launch()",
         "before": "import profiler_agent.environment as e; e.describe_launch()"}),
    "first job-CPU reading (training thread, first step)": (
        "import os; from profiler_agent.contention import JobCpu; j = JobCpu(os.getppid())",
        {"after": "import os; from profiler_agent.contention import JobCpu; j = JobCpu(os.getppid()); "
                  "j.sample(rescan=False)",
         "before": "import os; from profiler_agent.contention import JobCpu; j = JobCpu(os.getppid()); j.sample()"}),
    "CPU device name (first step; forks uname -p before)": (
        "import platform",
        {"after": "import platform, sys; platform.machine() if sys.platform.startswith('linux') else platform.processor()",
         "before": "import platform; platform.processor() or platform.machine()"}),
}


def measure_components(before: Path, rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """Median (part - set-up) wall and CPU milliseconds of each COMPONENTS entry, before and after."""
    homes = {"after": ROOT, "before": before.resolve()}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, (setup, parts) in COMPONENTS.items():
        diffs: dict[str, list[tuple[float, float]]] = {"after": [], "before": []}
        for i in range(rounds):
            for side in ("after", "before") if i % 2 == 0 else ("before", "after"):
                env = _env(homes[side])
                base = _time([sys.executable, "-c", setup], env)
                full = _time([sys.executable, "-c", parts[side]], env)
                diffs[side].append((full[0] - base[0], full[1] - base[1]))
        out[name] = {side: {"wall_ms": round(1e3 * statistics.median(d[0] for d in v), 1),
                            "cpu_ms": round(1e3 * statistics.median(d[1] for d in v), 1)}
                     for side, v in diffs.items()}
        print(f"  {name}: {out[name]}", flush=True)
    return out


# Import costs measured inside one process (process_time around the import, after its set-up):
# far steadier than whole-process differences, whose torch import alone varies by tens of ms.
IMPORTS: dict[str, tuple[str, str]] = {
    "agent after torch (job process: activation)": ("import torch", "import profiler_agent.activation"),
    "launcher (torchscope run process, no torch)": ("pass", "import profiler_agent.launcher"),
    "runformat in the launcher (after options, environment)": (
        "import subprocess, threading, ctypes, signal, profiler_agent.options, profiler_agent.environment",
        "import profiler_agent.runformat"),
    "psutil + a first sample (sampler thread, after torch)": (
        "import torch", "import psutil; p = psutil.Process(); p.cpu_percent(None); psutil.cpu_percent(None); "
                        "p.children(recursive=True); psutil.virtual_memory()"),
}


def measure_imports(before: Path | None, rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """Min and median CPU milliseconds of each IMPORTS entry, in this checkout (and ``before``)."""
    homes = {"after": ROOT} | ({"before": before.resolve()} if before is not None else {})
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, (setup, part) in IMPORTS.items():
        code = (f"import time\n{setup}\nt = time.process_time()\n{part}\n"
                "print((time.process_time() - t) * 1e3)")
        samples: dict[str, list[float]] = {side: [] for side in homes}
        for i in range(rounds):
            for side in homes if i % 2 == 0 else reversed(list(homes)):
                env = _env(homes[side])
                proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=env["PYTHONPATH"],
                                      capture_output=True, text=True, check=True)
                samples[side].append(float(proc.stdout.split()[-1]))
        out[name] = {side: {"cpu_ms_min": round(min(v), 1), "cpu_ms_median": round(statistics.median(v), 1)}
                     for side, v in samples.items()}
        print(f"  {name}: {out[name]}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--agent-args", default="--no-profile --no-graph",
                        help="options given to torchscope run (default: %(default)s)")
    parser.add_argument("--also", type=Path, metavar="DIR",
                        help="a third side: the job wrapped by the checkout in DIR (before/after figures)")
    parser.add_argument("--trivial", action="store_true",
                        help="an empty job (no torch): what the launcher and the bootstrap cost alone")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="PYTHONDONTWRITEBYTECODE=1 for the jobs: every module of the checkout compiled each time")
    parser.add_argument("--components", action="store_true",
                        help="instead: the parts changed in issue 11's second round, this checkout vs --also DIR")
    parser.add_argument("--imports", action="store_true",
                        help="instead: import CPU time of the agent's parts, in-process (with --also: before/after)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    if args.imports:
        found = measure_imports(args.also, args.pairs)
        if args.json:
            args.json.write_text(json.dumps(found, indent=1))
        return
    if args.components:
        if args.also is None:
            parser.error("--components needs --also DIR (the checkout before)")
        parts = measure_components(args.also, args.pairs)
        if args.json:
            args.json.write_text(json.dumps(parts, indent=1))
        return
    result = measure(args.pairs, args.steps, shlex.split(args.agent_args), args.also, trivial=args.trivial,
                     bytecode_cache=not args.no_bytecode_cache)
    job = "an empty job" if args.trivial else f"{args.steps} steps"
    print(f"{args.pairs} rounds, {job}, torchscope run {args.agent_args}, "
          f"bytecode cache {'off' if args.no_bytecode_cache else 'on'}")
    for name in ("wrapped", "also"):
        s = result.get(name)
        if not isinstance(s, dict):
            continue
        print(f"  {name} ({s.get('home', ROOT)}):")
        for what in ("wall", "cpu"):
            print(f"    {what}: plain {s[f'plain_{what}_median_s']:.3f} s, wrapped {s[f'wrapped_{what}_median_s']:.3f} s,"
                  f" fixed cost {s[f'fixed_cost_{what}_median_s']:.3f} s (median per round),"
                  f" ratio {s[f'ratio_{what}_median']:.3f}; mins: plain {s[f'plain_{what}_min_s']:.3f} s,"
                  f" wrapped {s[f'wrapped_{what}_min_s']:.3f} s, difference {s[f'fixed_cost_{what}_of_mins_s']:.3f} s")
    print(f"  load average at the end {result['load_average']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
