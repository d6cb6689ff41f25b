"""Record the sample runs (baseline and optimized) into a run store, unless they are already there.

    python -m sample_models.record --root runs            # what `make samples` / `make demo` call
    python -m sample_models.record --root runs --force    # record again

Each run is recorded through the zero-code wrapper exactly as a user would:
``torchscope run --name baseline --grad-norm -- python sample_models/resnet_baseline.py --eval-every 9 ...``
(the evaluation after step 9 falls inside the default profiler window, iterations 8-10, so the
advisor sees whether it builds autograd graphs; ``--grad-norm`` feeds the gradient rules).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from profiler_agent.launcher import LaunchRequest, launch
from profiler_agent.options import AgentOptions
from profiler_agent.options import ProfileSchedule
from profiler_agent.runformat import RunStatus, RunStoreNotFoundError, layout, list_runs, read_jsonl

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Sample:
    name: str
    script: str
    tags: tuple[str, ...]
    notes: str


SAMPLES = (
    Sample("baseline", "resnet_baseline.py", ("sample", "baseline"),
           "3x3 convs, num_workers=0 with heavy per-sample augmentation, eval without no_grad"),
    Sample("optimized", "resnet_optimized.py", ("sample", "optimized"),
           "depthwise-separable convs, 2 persistent workers, light batch augmentation, no_grad eval"),
)


def recorded_names(root: Path) -> set[str]:
    """Names of the finished runs already in the store."""
    try:
        listing = list_runs(root)
    except RunStoreNotFoundError:
        return set()
    return {m.name for _, m in listing.runs if m.status is RunStatus.FINISHED}


def eval_step_in_window(schedule: ProfileSchedule = ProfileSchedule()) -> int:
    """The ``--eval-every`` that puts the first evaluation in the middle of the first profiled window.

    The scripts evaluate after their N-th optimizer step, i.e. during the agent's iteration N;
    the window's active iterations are ``1 + wait + warmup`` onwards (8, 9, 10 by default).
    """
    return 1 + schedule.wait + schedule.warmup + schedule.active // 2


def sample_command(sample: Sample, *, steps: int, extra: list[str],
                   schedule: ProfileSchedule = ProfileSchedule()) -> tuple[str, ...]:
    """The job's command line: the evaluation lands in the profiled window (``extra`` may override it)."""
    return (sys.executable, str(HERE / sample.script), "--steps", str(steps),
            "--eval-every", str(eval_step_in_window(schedule)), *extra)


def sample_request(sample: Sample, root: Path, *, steps: int, extra: list[str],
                   memory_timeline: bool = False) -> LaunchRequest:
    """The launch of one sample run: ``--grad-norm``, and ``--memory-timeline`` when asked.

    The memory timeline (memory by category, compared on the Compare page) is off by default:
    torch exports it in pure Python after each window, which made recording the baseline
    4-5x slower (81-115 s instead of 22 s; docs/compare.md, Memory)."""
    return LaunchRequest(command=sample_command(sample, steps=steps, extra=extra), name=sample.name, root=root,
                         tags=sample.tags, notes=sample.notes,
                         options=AgentOptions(grad_norm=True, memory_timeline=memory_timeline))


def record_sample(sample: Sample, root: Path, *, steps: int, extra: list[str], memory_timeline: bool = False) -> int:
    """Record one sample run through the launcher; return the job's exit code."""
    return launch(sample_request(sample, root, steps=steps, extra=extra, memory_timeline=memory_timeline))


def read_median_step_time(run_dir: Path, schedule: ProfileSchedule = ProfileSchedule()) -> float | None:
    """Median ``step_time_s`` of a run, leaving out step 0, the steps inside profiler windows and
    the iterations that ran an evaluation (those holding a ``val_loss`` line)."""
    first = 1 + schedule.wait
    window = range(first, first + schedule.warmup + schedule.active + 1)  # +1: the trace export
    records = read_jsonl(run_dir / layout.METRICS).records
    evaluated = {r.get("step") for r in records if "val_loss" in r and "step_time_s" not in r}
    times = [r["step_time_s"] for r in records
             if isinstance(r.get("step_time_s"), (int, float)) and r.get("step", 0) > 0
             and r["step"] not in window and r["step"] not in evaluated]
    if not times:
        return None
    times.sort()
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2


def print_comparison(root: Path) -> None:
    """Print the newest baseline's and optimized run's median step time and the speed-up."""
    try:
        runs = list_runs(root).runs
    except RunStoreNotFoundError:
        return
    medians: dict[str, float] = {}
    for run_dir, manifest in runs:  # newest first
        if manifest.name in ("baseline", "optimized") and manifest.name not in medians:
            median = read_median_step_time(run_dir)
            if median is not None:
                medians[manifest.name] = median
    if len(medians) == 2:
        base, opt = medians["baseline"], medians["optimized"]
        print(f"median step time (without step 0, the profiler window and evaluations): "
              f"baseline {base * 1e3:.1f} ms, optimized {opt * 1e3:.1f} ms "
              f"({base / opt:.2f}x faster, {100 * (1 - opt / base):.0f}% less time per step)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sample_models.record", description=__doc__.splitlines()[0])
    p.add_argument("--root", default=None, help="run store (default: $TORCHSCOPE_RUNS or ./runs)")
    p.add_argument("--steps", type=int, default=40, help="training steps per run (40)")
    p.add_argument("--force", action="store_true", help="record even if the runs exist")
    p.add_argument("--only", choices=[s.name for s in SAMPLES], action="append", help="record only these")
    p.add_argument("--memory-timeline", action="store_true",
                   help="also record memory by category (torchscope run --memory-timeline; much slower to record)")
    args, extra = p.parse_known_args(argv)
    root = layout.resolve_root(args.root)
    have = set() if args.force else recorded_names(root)
    worst = 0
    for sample in SAMPLES:
        if args.only and sample.name not in args.only:
            continue
        if sample.name in have:
            print(f"sample run {sample.name!r} already in {root}; skipped (--force to record again)")
            continue
        code = record_sample(sample, root, steps=args.steps, extra=extra, memory_timeline=args.memory_timeline)
        worst = worst or code
    print_comparison(root)
    return worst


if __name__ == "__main__":
    sys.exit(main())
