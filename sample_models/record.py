"""Record the sample runs (baseline and optimized) into a run store, unless they are already there.

    python -m sample_models.record --root runs            # what `make samples` / `make demo` call
    python -m sample_models.record --root runs --force    # record again

Each run is recorded through the zero-code wrapper exactly as a user would:
``torchscope run --name baseline -- python sample_models/resnet_baseline.py ...``.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from profiler_agent.launcher import LaunchRequest, launch
from profiler_agent.options import AgentOptions
from profiler_agent.runformat import RunStatus, RunStoreNotFoundError, layout, list_runs

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


def record_sample(sample: Sample, root: Path, *, steps: int, extra: list[str]) -> int:
    """Record one sample run through the launcher; return the job's exit code."""
    command = (sys.executable, str(HERE / sample.script), "--steps", str(steps), *extra)
    request = LaunchRequest(command=command, name=sample.name, root=root, tags=sample.tags,
                            notes=sample.notes, options=AgentOptions())
    return launch(request)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sample_models.record", description=__doc__.splitlines()[0])
    p.add_argument("--root", default=None, help="run store (default: $TORCHSCOPE_RUNS or ./runs)")
    p.add_argument("--steps", type=int, default=40, help="training steps per run (40)")
    p.add_argument("--force", action="store_true", help="record even if the runs exist")
    p.add_argument("--only", choices=[s.name for s in SAMPLES], action="append", help="record only these")
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
        code = record_sample(sample, root, steps=args.steps, extra=extra)
        worst = worst or code
    return worst


if __name__ == "__main__":
    sys.exit(main())
