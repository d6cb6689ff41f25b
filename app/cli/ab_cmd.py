"""`torchscope ab BASELINE_CMD CANDIDATE_CMD`: interleaved A/B runs, then the verdict from the replicates (CLI layer).

Runs the two commands alternately in balanced pairs (A B, B A, A B, ...: with 3 runs per side
``A B B A A B``), each one a normal recorded run (``torchscope run --name G --group G -- CMD``)
in group ``<name>-baseline`` or ``<name>-candidate``. Interleaving spreads slow drifts of the
machine (other jobs, thermal state, caches) over both sides instead of loading one; the ABBA
order also cancels a linear drift within each block of four. Then both groups are compared as
``torchscope diff --group A --group B`` does, with the same text, ``--json`` and gates.

Progress goes to stderr (one line per run), the verdict to stdout. The first run that fails
stops the A/B: the rest are not started (a command that fails once usually fails again, and a
verdict from what finished would be a verdict on fewer replicates than asked), the tail of its
output is shown and the exit code is 2. Exit codes otherwise as ``diff``: 0, 1 a gate failed,
2 usage or input error, 3 inconclusive with ``--fail-if-inconclusive``.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import app
from app.analysis.compare.comparison import Comparison, diff_sides
from app.cli import diff_cmd
from app.errors import TorchscopeError, UsageError
from app.workspace.sides import group_of, load_group_side
from app.workspace.store import progress_step_time, store_manifests

HELP = "run a baseline and a candidate command alternately N times each, then judge the candidate from the replicates"

__all__ = ["HELP", "add_arguments", "run", "Side", "AbPlan", "RunOutcome", "interleaved_order", "plan_from_args", "run_all", "compare_groups"]

DEFAULT_RUNS = 3
_TAIL_LINES = 20


class Side(StrEnum):
    BASELINE = "baseline"
    CANDIDATE = "candidate"


@dataclass(frozen=True)
class AbPlan:
    """What ``ab`` will run: both commands, their groups, the order and the options of each run."""

    baseline: tuple[str, ...]
    candidate: tuple[str, ...]
    groups: dict[Side, str]
    order: tuple[Side, ...]
    run_options: tuple[str, ...]  # passed to every `torchscope run` before `--`
    root: str | None

    def command(self, side: Side) -> tuple[str, ...]:
        return self.baseline if side is Side.BASELINE else self.candidate


@dataclass(frozen=True)
class RunOutcome:
    """One finished (or failed) run of the A/B."""

    index: int
    side: Side
    exit_code: int
    wall_s: float
    run_dir: Path | None
    median_step_s: float | None
    output_tail: str

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "side": str(self.side), "exit_code": self.exit_code, "wall_s": self.wall_s,
                "run": str(self.run_dir) if self.run_dir else None, "median_step_s": self.median_step_s}


def interleaved_order(runs_per_side: int) -> tuple[Side, ...]:
    """The balanced order: pairs A B, B A, A B, ... (``A B B A A B`` for 3), ``2 * runs_per_side`` long.

    Each side goes first in half the pairs (one more for A when the count is odd), so neither side
    always runs on a machine the other has just warmed. Raises UsageError below 1.
    """
    if runs_per_side < 1:
        raise UsageError(f"--runs {runs_per_side}: expected 1 or more runs per side")
    order: list[Side] = []
    for pair in range(runs_per_side):
        first, second = (Side.BASELINE, Side.CANDIDATE) if pair % 2 == 0 else (Side.CANDIDATE, Side.BASELINE)
        order += [first, second]
    return tuple(order)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", help="the baseline command, one quoted string (e.g. 'python train.py')")
    parser.add_argument("candidate", help="the candidate command, one quoted string (e.g. 'python train.py --fast')")
    parser.add_argument("--runs", "-n", type=int, default=DEFAULT_RUNS, metavar="N",
                        help=f"runs of each command (default {DEFAULT_RUNS}; 2 or more give an interval that covers "
                             "run-to-run noise)")
    parser.add_argument("--name", help="prefix of the groups and runs (default ab-<date>-<time>)")
    parser.add_argument("--group-a", metavar="GROUP", help="baseline group (default <name>-baseline)")
    parser.add_argument("--group-b", metavar="GROUP", help="candidate group (default <name>-candidate)")
    parser.add_argument("--append", action="store_true",
                        help="add to groups that already hold runs (their earlier runs count in the verdict)")
    parser.add_argument("--root", help="run store (default $TORCHSCOPE_RUNS or ./runs)")
    parser.add_argument("--verbose", "-v", action="store_true", help="show the commands' own output while they run")
    runs = parser.add_argument_group("each run (passed to torchscope run)")
    runs.add_argument("--max-steps", type=int, default=None, metavar="N",
                      help="end each job cleanly after N optimizer steps (the run counts as finished)")
    runs.add_argument("--no-profile", action="store_true", help="no torch.profiler traces: faster runs, no breakdown")
    runs.add_argument("--run-args", default="", metavar="'ARGS'",
                      help="more torchscope run options, one quoted string (e.g. '--active 5 --no-graph')")
    cmp = parser.add_argument_group("comparison (as torchscope diff)")
    cmp.add_argument("--warmup", type=int, default=None, metavar="K",
                     help="steps dropped at the start of each run (default: automatic, see docs/compare.md)")
    cmp.add_argument("--threshold", type=float, default=2.0, metavar="PCT",
                     help="smallest change (in %%) that counts as a difference (default 2)")
    cmp.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    cmp.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    cmp.add_argument("--top", type=int, default=10, help="rows of the op and kernel tables")
    cmp.add_argument("--advice", dest="no_advice", action="store_false",
                     help="also diff the advisor's findings (slower; off by default, unlike diff)")
    cmp.add_argument("--json", action="store_true", help="print one JSON document: diff's, plus an \"ab\" section")
    cmp.add_argument("--fail-if-slower", type=float, default=None, metavar="PCT",
                     help="exit 1 when the candidate is significantly more than PCT %% slower")
    cmp.add_argument("--fail-if-more-memory", type=float, default=None, metavar="PCT",
                     help="exit 1 when the peak memory grew by more than PCT %%")
    cmp.add_argument("--fail-if-inconclusive", action="store_true",
                     help="exit 3 when the verdict is inconclusive (the sides ran under different load)")
    parser.set_defaults(by="name", no_advice=True)  # diff_cmd.options_from_args and advice_diff read these


def _split(text: str, what: str) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(text))
    except ValueError as e:
        raise UsageError(f"{what} {text!r}: cannot split into words ({e})") from None
    if not words:
        raise UsageError(f"{what}: empty command; give it as one quoted string, e.g. 'python train.py'")
    return words


def plan_from_args(args: argparse.Namespace, *, now: float | None = None) -> AbPlan:
    """The AbPlan the arguments describe; raises UsageError for impossible values."""
    order = interleaved_order(args.runs)
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError(f"--max-steps {args.max_steps}: expected 1 or more optimizer steps")
    for flag in ("fail_if_slower", "fail_if_more_memory"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise UsageError(f"--{flag.replace('_', '-')} {value}: expected a percentage >= 0")
    diff_cmd.options_from_args(args)  # validates --threshold, --resamples, --warmup as diff does
    name = args.name or time.strftime("ab-%Y%m%d-%H%M%S", time.localtime(now))
    groups = {Side.BASELINE: args.group_a or f"{name}-baseline", Side.CANDIDATE: args.group_b or f"{name}-candidate"}
    if groups[Side.BASELINE] == groups[Side.CANDIDATE]:
        raise UsageError(f"--group-a and --group-b are both {groups[Side.BASELINE]!r}: the sides need two groups")
    extra = _split(args.run_args, "--run-args") if args.run_args.strip() else ()
    for reserved in ("--name", "--group", "--root", "--"):
        if any(word == reserved or word.startswith(f"{reserved}=") for word in extra):
            raise UsageError(f"--run-args may not hold {reserved}: ab sets it for each run")
    options = (*(("--max-steps", str(args.max_steps)) if args.max_steps is not None else ()),
               *(("--no-profile",) if args.no_profile else ()), *extra)
    return AbPlan(baseline=_split(args.baseline, "baseline command"),
                  candidate=_split(args.candidate, "candidate command"),
                  groups=groups, order=order, run_options=options, root=args.root)


def _check_groups(plan: AbPlan, append: bool) -> None:
    """Refuse to mix replicates of an earlier A/B into this one unless --append."""
    if append:
        return
    held = {side: [p for p, m in store_manifests(plan.root).items() if group_of(m) == group]
            for side, group in plan.groups.items()}
    busy = [f"{plan.groups[s]!r} ({len(p)} run(s))" for s, p in held.items() if p]
    if busy:
        raise UsageError(f"group {' and '.join(busy)} already exists in the store; choose another --name "
                         "or --group-a/--group-b, or pass --append to add to it")


def _launcher() -> list[str]:
    """``python -m app`` for the child launcher, with -P (no cwd on sys.path) when torchscope is not
    imported from the cwd: a user's own ``app`` package must not shadow ours."""
    home = Path(app.__file__).resolve().parent.parent
    safe = ["-P"] if home != Path.cwd().resolve() else []
    return [sys.executable, *safe, "-m", "app"]


def _run_one(plan: AbPlan, index: int, side: Side, verbose: bool) -> RunOutcome:
    group = plan.groups[side]
    argv = [*_launcher(), "run", "--name", group, "--group", group, *(("--root", plan.root) if plan.root else ()),
            *plan.run_options, "--", *plan.command(side)]
    before = set(store_manifests(plan.root))
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        # Verbose: the job's output goes to our stderr, never stdout, which may be carrying --json.
        out: Any = 2 if verbose else log
        proc = subprocess.Popen(argv, stdout=out, stderr=out)
        try:
            code = proc.wait()
        except BaseException:  # Ctrl-C: the launcher got the SIGINT too; give it time to mark the run
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
        wall = time.perf_counter() - t0
        log.seek(0)
        tail = "\n".join(log.read().decode(errors="replace").splitlines()[-_TAIL_LINES:])
    new = [p for p, m in store_manifests(plan.root).items() if p not in before and m.name == group]
    run_dir = max(new) if new else None
    return RunOutcome(index=index, side=side, exit_code=code, wall_s=wall, run_dir=run_dir,
                      median_step_s=progress_step_time(run_dir) if run_dir else None, output_tail=tail)


def _progress(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def run_all(plan: AbPlan, *, verbose: bool = False) -> list[RunOutcome]:
    """Run the plan's order; return the outcomes. Raises TorchscopeError at the first failed run."""
    outcomes: list[RunOutcome] = []
    total = len(plan.order)
    for i, side in enumerate(plan.order, 1):
        _progress(f"run {i}/{total}: {side:<9}  {shlex.join(plan.command(side))}")
        o = _run_one(plan, i, side, verbose)
        outcomes.append(o)
        where = o.run_dir.name if o.run_dir else "no run recorded"
        if o.exit_code != 0:
            if o.output_tail:
                _progress(f"  last lines of its output:\n{o.output_tail}")
            raise TorchscopeError(f"run {i}/{total} ({side}) failed with exit code {o.exit_code} after "
                                  f"{o.wall_s:.1f} s ({where}); the remaining {total - i} run(s) were not started")
        median = f", median step {1e3 * o.median_step_s:.2f} ms" if o.median_step_s is not None else ""
        _progress(f"  finished in {o.wall_s:.1f} s{median} -> {where}")
    return outcomes


def compare_groups(plan: AbPlan, args: argparse.Namespace) -> Comparison:
    """Both groups as comparison sides, compared as ``torchscope diff --group A --group B`` does."""
    baseline = load_group_side(plan.groups[Side.BASELINE], plan.root)
    candidate = load_group_side(plan.groups[Side.CANDIDATE], plan.root)
    return diff_sides(baseline, candidate, diff_cmd.options_from_args(args))


def _replicates_line(outcomes: list[RunOutcome]) -> str:
    """One line of each side's per-run median step times, in run order: the run-to-run spread at a glance."""
    parts = []
    for side in Side:
        ms = [f"{1e3 * o.median_step_s:.2f}" for o in outcomes if o.side is side and o.median_step_s is not None]
        parts.append(f"{side} {' '.join(ms) or '-'}")
    return f"median step time of each run (ms, in run order): {' | '.join(parts)}\n"


def run(args: argparse.Namespace) -> int:
    plan = plan_from_args(args)
    _check_groups(plan, args.append)
    _progress(f"torchscope ab: {len(plan.order) // 2} run(s) per side, order "
              f"{' '.join('A' if s is Side.BASELINE else 'B' for s in plan.order)}; groups "
              f"{plan.groups[Side.BASELINE]!r} (A) and {plan.groups[Side.CANDIDATE]!r} (B)")
    outcomes = run_all(plan, verbose=args.verbose)
    cmp = compare_groups(plan, args)
    ab = {"order": [str(s) for s in plan.order], "groups": {str(s): g for s, g in plan.groups.items()},
          "commands": {str(s): list(plan.command(s)) for s in Side}, "runs": [o.to_json() for o in outcomes]}
    return diff_cmd.report(cmp, args, extra_json={"ab": ab}, extra_text=_replicates_line(outcomes))
