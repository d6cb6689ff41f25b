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
and the shutdown. Reported, for wall time and for CPU time (user + system of the whole process
tree, from ``os.wait4``: far less sensitive to other jobs on a shared machine, but it also counts
the launcher's threads that run beside the job, and not the time spent waiting on fsync): the
median of each side, the median of the per-round differences (wrapped - plain, seconds: the fixed
cost) with two 95 % intervals (the sign test's, distribution-free, and a seeded bootstrap's), the
difference of the two sides' minimums, the median per-round ratio, and a verdict on the goal
(<= 0.2 s): ``shown`` only when the sign-test interval's upper end and the difference of minimums
are both below it, ``missed`` when the interval lies above it, else ``not shown``. Six rounds at
least give an interval; 16 give the 4th to 13th of the sorted differences.
``--also DIR`` adds a third side in each round, the same job wrapped by the checkout in DIR (e.g.
``git archive`` of an older commit), so before/after figures share the machine's load; its
``change`` is this tree minus that one, per round, with the same intervals.

Each job first writes the time its own code starts (``STAMP``): the report adds how much later
than plain the wrapped job's code starts (the launcher's start, its work before the job, the
bootstrap), per side, as the median per round.

Python's bytecode cache is allowed (``PYTHONDONTWRITEBYTECODE`` is removed for the jobs) as in a
normal install; the first, untimed round writes the caches.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Every job first notes when its own code starts (the wrapped side: after the launcher and the
# bootstrap), in the file $FIXED_COST_STAMP: the start delay, wrapped minus plain, is how much
# later the wrapper lets the job begin (issue 11: the launcher starts the job before its imports).
STAMP = """\
import os, time
with open(os.environ["FIXED_COST_STAMP"], "w") as _f:
    _f.write(repr(time.time()))
"""

JOB = STAMP + """\
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


def _time(cmd: list[str], env: dict[str, str]) -> tuple[float, float] | tuple[float, float, float]:
    # cwd = the checkout on PYTHONPATH: `python -m app` puts the working directory first on sys.path.
    """(wall seconds, CPU seconds of the process and its reaped descendants[, seconds until the
    job's own code started]) of one run of ``cmd``; the third when the job writes $FIXED_COST_STAMP."""
    stamp = env.get("FIXED_COST_STAMP")
    if stamp:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stamp)
    started = time.time()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=env["PYTHONPATH"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited with {proc.returncode}")
    if stamp and os.path.exists(stamp):
        with open(stamp) as f:
            return wall, usage.ru_utime + usage.ru_stime, float(f.read()) - started
    return wall, usage.ru_utime + usage.ru_stime


def _env(home: Path, bytecode_cache: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")}
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = str(home)
    return env


GOAL_S = 0.2  # issue 11: the agent's fixed cost per job, at most
CONFIDENCE = 0.95


def sign_test_interval(diffs: list[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The distribution-free interval for the median of ``diffs``: order statistics k and n-k+1 of
    the sorted values, k the largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 (coverage
    at least ``confidence`` whatever the distribution; a noisy round moves it by one rank only).
    None below 6 values, where even the extremes do not reach 95 %."""
    n = len(diffs)
    alpha = (1 - confidence) / 2
    cdf, k = 0.0, 0
    for i in range(n + 1):  # cdf = P(Bin(n, 1/2) <= i - 1) before adding term i
        if cdf + math.comb(n, i) / 2 ** n > alpha:
            k = i
            break
        cdf += math.comb(n, i) / 2 ** n
    if k < 1:
        return None
    ordered = sorted(diffs)
    return ordered[k - 1], ordered[n - k]


def bootstrap_interval(diffs: list[float], confidence: float = CONFIDENCE, *, resamples: int = 4000,
                       seed: int = 11) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the median of ``diffs`` (seeded: the same rounds give the
    same interval); None below 3 values."""
    if len(diffs) < 3:
        return None
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(resamples))
    alpha = (1 - confidence) / 2
    return medians[int(alpha * resamples)], medians[min(resamples - 1, int((1 - alpha) * resamples))]


def paired_summary(plain: list[float], wrapped: list[float], goal_s: float = GOAL_S) -> dict[str, object]:
    """One measure (wall or CPU seconds) of paired rounds: the median of the per-round differences
    (wrapped - plain) with its sign-test and bootstrap 95 % intervals, the difference of the
    minimums, the median ratio, and whether the goal is shown: the sign-test interval's upper end
    below ``goal_s`` (and the difference of minimums too, so that the two statistics agree)."""
    diffs = [b - a for a, b in zip(plain, wrapped, strict=True)]
    sign = sign_test_interval(diffs)
    boot = bootstrap_interval(diffs)
    of_mins = min(wrapped) - min(plain)
    out: dict[str, object] = {
        "plain_median_s": statistics.median(plain), "wrapped_median_s": statistics.median(wrapped),
        "fixed_cost_median_s": statistics.median(diffs),
        "sign_test_ci95_s": list(sign) if sign else None, "bootstrap_ci95_s": list(boot) if boot else None,
        "ratio_median": statistics.median(b / a for a, b in zip(plain, wrapped, strict=True)),
        # The quietest run of each side: on a shared machine the least disturbed estimate.
        "plain_min_s": min(plain), "wrapped_min_s": min(wrapped), "fixed_cost_of_mins_s": of_mins,
        # The two statistics agree when they fall on the same side of the goal.
        "agree": sign is not None and (sign[1] <= goal_s) == (of_mins <= goal_s) == (sign[0] <= goal_s),
    }
    if sign is None:
        out["goal"] = f"not shown: {len(diffs)} rounds give no 95 % interval (6 at least)"
    elif sign[1] <= goal_s and of_mins <= goal_s:
        out["goal"] = f"shown: the 95 % interval {sign[0]:.3f}-{sign[1]:.3f} s and the difference of minimums " \
                      f"{of_mins:.3f} s are below {goal_s} s"
    elif sign[0] > goal_s and of_mins > goal_s:
        out["goal"] = f"missed: the 95 % interval {sign[0]:.3f}-{sign[1]:.3f} s and the difference of minimums " \
                      f"{of_mins:.3f} s are above {goal_s} s"
    else:
        out["goal"] = (f"not shown: the 95 % interval {sign[0]:.3f}-{sign[1]:.3f} s and the difference of "
                       f"minimums {of_mins:.3f} s do not both lie on one side of {goal_s} s")
    return out


def _summary(plain: list[tuple[float, ...]], wrapped: list[tuple[float, ...]]) -> dict[str, object]:
    out: dict[str, object] = {}
    if all(len(x) > 2 for x in (*plain, *wrapped)):
        delays = [b[2] - a[2] for a, b in zip(plain, wrapped, strict=True)]
        sign = sign_test_interval(delays)
        out["start_delay"] = {"plain_median_s": statistics.median(x[2] for x in plain),
                              "wrapped_median_s": statistics.median(x[2] for x in wrapped),
                              "delay_median_s": statistics.median(delays),
                              "sign_test_ci95_s": list(sign) if sign else None}
    for k, what in enumerate(("wall", "cpu")):
        s = paired_summary([x[k] for x in plain], [x[k] for x in wrapped])
        # The flat keys of earlier versions, kept for scripts that read them.
        out[f"plain_{what}_median_s"] = s["plain_median_s"]
        out[f"wrapped_{what}_median_s"] = s["wrapped_median_s"]
        out[f"fixed_cost_{what}_median_s"] = s["fixed_cost_median_s"]
        out[f"ratio_{what}_median"] = s["ratio_median"]
        out[f"plain_{what}_min_s"] = s["plain_min_s"]
        out[f"wrapped_{what}_min_s"] = s["wrapped_min_s"]
        out[f"fixed_cost_{what}_of_mins_s"] = s["fixed_cost_of_mins_s"]
        out[what] = s
    return out


def measure(pairs: int, steps: int, agent_args: list[str], also: Path | None = None, *,
            trivial: bool = False, bytecode_cache: bool = True) -> dict[str, object]:
    """Run ``pairs`` rounds of plain and wrapped jobs (order rotating); return the times and their summary."""
    homes = {"wrapped": ROOT, **({"also": also.resolve()} if also is not None else {})}
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.py"
        job.write_text(STAMP if trivial else JOB)  # trivial: the launcher and bootstrap alone, no torch
        plain = [sys.executable, str(job), str(steps)]
        stamp = {"FIXED_COST_STAMP": str(Path(tmp) / "stamp")}
        sides = {"plain": (plain, _env(ROOT, bytecode_cache) | stamp)}
        for name, home in homes.items():
            sides[name] = ([sys.executable, "-m", "app", "run", "--root", str(Path(tmp) / name), *agent_args,
                            "--", *plain], _env(home, bytecode_cache) | stamp)
        for cmd, env in sides.values():  # warm the page cache and write the bytecode caches
            _time(cmd, env)
        times: dict[str, list[tuple[float, ...]]] = {name: [] for name in sides}
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
        result["change"] = {what: paired_summary([t[k] for t in times["also"]], [t[k] for t in times["wrapped"]])
                            for k, what in enumerate(("wall", "cpu"))}
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
    # Wave 8: the hot path imports these before the job starts (the old tree: its whole launcher).
    "torchscope run before the job starts (app.cli, profiler_agent.cli)": ("pass", "import app.cli, profiler_agent.cli"),
    "bootstrap in every Python process of the job, before torch": ("pass", "import profiler_agent.autoinstrument"),
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
            m = s[what]
            sign, boot = m["sign_test_ci95_s"], m["bootstrap_ci95_s"]
            print(f"    {what}: plain {m['plain_median_s']:.3f} s, wrapped {m['wrapped_median_s']:.3f} s,"
                  f" fixed cost {m['fixed_cost_median_s']:.3f} s (median per round"
                  + (f", 95 % sign-test {sign[0]:.3f}-{sign[1]:.3f} s" if sign else "")
                  + (f", bootstrap {boot[0]:.3f}-{boot[1]:.3f} s" if boot else "")
                  + f"), ratio {m['ratio_median']:.3f}; mins: plain {m['plain_min_s']:.3f} s,"
                  f" wrapped {m['wrapped_min_s']:.3f} s, difference {m['fixed_cost_of_mins_s']:.3f} s")
            print(f"      goal <= {GOAL_S} s ({what}): {m['goal']}")
        d = s.get("start_delay")
        if isinstance(d, dict):
            sign = d["sign_test_ci95_s"]
            print(f"    the job's own code starts {d['delay_median_s'] * 1e3:.0f} ms later than plain (median per round"
                  + (f", 95 % {sign[0] * 1e3:.0f}-{sign[1] * 1e3:.0f} ms" if sign else "")
                  + f"; plain starts after {d['plain_median_s'] * 1e3:.0f} ms)")
    change = result.get("change")
    if isinstance(change, dict):
        for what in ("wall", "cpu"):
            m, sign = change[what], change[what]["sign_test_ci95_s"]
            print(f"  this tree - --also ({what}): median {m['fixed_cost_median_s']:+.3f} s per round"
                  + (f" (95 % {sign[0]:+.3f} to {sign[1]:+.3f} s)" if sign else "")
                  + f", difference of minimums {m['fixed_cost_of_mins_s']:+.3f} s")
    print(f"  load average at the end {result['load_average']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
