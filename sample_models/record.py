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

from app.analysis.run.final_value import FinalValue, final_value
from app.analysis.run.step_time import steady_step_time
from profiler_agent.launcher import LaunchRequest, launch
from profiler_agent.options import AgentOptions, ProfileSchedule
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


_DEFAULT_SCHEDULE = ProfileSchedule()  # the agent's default windows


def eval_step_in_window(schedule: ProfileSchedule = _DEFAULT_SCHEDULE) -> int:
    """The ``--eval-every`` that puts the first evaluation in the middle of the first profiled window.

    The scripts evaluate after their N-th optimizer step, i.e. during the agent's iteration N;
    the window's active iterations are ``1 + wait + warmup`` onwards (8, 9, 10 by default).
    """
    return 1 + schedule.wait + schedule.warmup + schedule.active // 2


def sample_command(sample: Sample, *, steps: int, extra: list[str],
                   schedule: ProfileSchedule = _DEFAULT_SCHEDULE) -> tuple[str, ...]:
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


@dataclass(frozen=True)
class RunSummary:
    """What the recorder prints about a run: the headline step time (app.analysis.run.step_time: median of
    the steady-state steps) and the final loss (app.analysis.run.final_value: median of the last window),
    the same numbers as ``torchscope ls``, the Run page and Compare."""

    step_time_s: float | None
    final_loss: FinalValue | None


def summarise_recorded_run(run_dir: Path) -> RunSummary:
    """The headline step time and final loss of a recorded run, by the rules every view uses."""
    records = read_jsonl(run_dir / layout.METRICS).records
    return RunSummary(steady_step_time(records).value_s, final_value(records, "loss"))


def read_median_step_time(run_dir: Path) -> float | None:
    """The run's headline step time (seconds): the median of its steady-state steps (warm-up,
    profiled and evaluation steps left out, app.analysis.run.step_time); None without step times."""
    return summarise_recorded_run(run_dir).step_time_s


def format_summary(name: str, summary: RunSummary) -> str:
    """'baseline: step time 52.1 ms (median, steady state), final loss (median of last 4) 0.1586'."""
    step = f"{summary.step_time_s * 1e3:.1f} ms" if summary.step_time_s is not None else "–"
    loss = f", {summary.final_loss.label} {summary.final_loss.value:.4g}" if summary.final_loss is not None else ""
    return f"{name}: step time {step} (median, steady state){loss}"


def print_comparison(root: Path) -> None:
    """Print the newest baseline's and optimized run's step time and final loss, and the speed-up."""
    try:
        runs = list_runs(root).runs
    except RunStoreNotFoundError:
        return
    summaries: dict[str, RunSummary] = {}
    folders: dict[str, Path] = {}
    for run_dir, manifest in runs:  # newest first
        if manifest.name in ("baseline", "optimized") and manifest.name not in summaries:
            summaries[manifest.name] = summarise_recorded_run(run_dir)
            folders[manifest.name] = run_dir
    for name in ("baseline", "optimized"):
        if name in summaries:
            print(format_summary(name, summaries[name]))
    if len(folders) == 2:
        print(speedup_sentence(folders["baseline"], folders["optimized"]))


def speedup_sentence(baseline: Path, optimized: Path) -> str:
    """The headline of ``torchscope diff baseline optimized``, word for word: one number for the
    speed-up, with its interval and verdict (a ratio of the medians printed here would be a
    second figure for the same change)."""
    from app.analysis.compare.comparison import diff_sides  # the comparison loads pandas: only here
    from app.presentation.comparison_text import headline
    from app.workspace.sides import load_side

    cmp = diff_sides(load_side(baseline), load_side(optimized))
    return f"{headline(cmp)}\n  (`torchscope diff baseline optimized` shows why, step by step)"


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
