"""``torchscope sweep``: a grid, random or Optuna search over a training command's ``{placeholders}`` (CLI layer, thin)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys

from app.analysis.sweep_space import (
    OBJECTIVE_REDUCTIONS,
    Param,
    check_placeholders,
    expand_grid,
    parse_grid,
    parse_param,
    parse_point,
)
from app.errors import UsageError
from app.workspace.sweep_runner import best_trial, require_optuna, run_sweep
from app.workspace.sweep_state import SweepSpec
from profiler_agent.runformat import layout
from profiler_agent.runformat.store_url import is_store_url

__all__ = ["HELP", "add_arguments", "run"]

HELP = ("search hyperparameters: each trial a torchscope run of the command with its {placeholders} filled "
        "(torchscope sweep --grid lr=0.1,0.01 -- python train.py --lr {lr})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", help="run store folder (default: $TORCHSCOPE_RUNS or ./runs)")
    parser.add_argument("--name", default="sweep", help="trial runs are named NAME-t<trial> (default: sweep)")
    parser.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2",
                        help="values of one parameter; the grid is every combination (repeatable)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=KIND:ARGS",
                        help="a range for --random/--optuna: loguniform:LOW:HIGH, uniform:LOW:HIGH, "
                             "int:LOW:HIGH, choice:A,B (repeatable)")
    method = parser.add_mutually_exclusive_group()
    method.add_argument("--random", type=int, metavar="N", help="N trials drawn at random from --param ranges")
    method.add_argument("--optuna", type=int, metavar="N",
                        help="N trials of Optuna's Bayesian search (TPE) with median pruning from live metrics")
    method.add_argument("--resume", metavar="SWEEP_ID", help="continue a stopped sweep (finished trials are kept)")
    parser.add_argument("--objective", default="val_loss",
                        help="metric of metrics.jsonl to optimise (default: val_loss; time_per_sample_s = "
                             "step_time_s / samples)")
    parser.add_argument("--direction", choices=("min", "max"), default="min", help="minimise or maximise (min)")
    parser.add_argument("--reduce", choices=OBJECTIVE_REDUCTIONS, default="best",
                        help="the run's objective from its values: best (by direction), last or median (best)")
    parser.add_argument("--parallel", type=int, default=1, metavar="N", help="trials at a time (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --random and Optuna's sampler (0)")
    parser.add_argument("--prune-startup-trials", type=int, default=5, metavar="N",
                        help="Optuna's MedianPruner: trials that finish before any is pruned (5, Optuna's default)")
    parser.add_argument("--enqueue", action="append", default=[], metavar="NAME=V,NAME=V",
                        help="--optuna: a trial to run first, e.g. a known-good configuration the pruner "
                             "then measures the others against (Optuna's enqueue_trial; repeatable)")
    parser.add_argument("--prune-warmup-steps", type=int, default=0, metavar="S",
                        help="Optuna's MedianPruner: steps of each trial never pruned (0)")
    parser.add_argument("--run-args", default="", metavar="'ARGS'",
                        help="options passed to every trial's torchscope run, e.g. '--no-profile --no-graph'")
    parser.add_argument("--json", action="store_true", help="print the final sweep state as JSON on stdout")
    parser.add_argument("command_args", nargs=argparse.REMAINDER, help="-- then the command, with {NAME} placeholders")


def _spec(args: argparse.Namespace) -> SweepSpec:
    command = list(args.command_args or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UsageError("no command to sweep; usage: torchscope sweep --grid lr=0.1,0.01 -- python train.py --lr {lr}")
    params: list[Param] = [parse_grid(g) for g in args.grid] + [parse_param(p) for p in args.param]
    if not params:
        raise UsageError("no parameters: give --grid NAME=V1,V2 or --param NAME=KIND:ARGS")
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise UsageError(f"parameter {next(n for n in names if names.count(n) > 1)!r} is given twice")
    check_placeholders(command, names)
    if args.random is not None or args.optuna is not None:
        method, trials = ("random", args.random) if args.random is not None else ("optuna", args.optuna)
        if trials < 1:
            raise UsageError(f"--{method} {trials}: need 1 or more trials")
    else:
        method = "grid"
        trials = len(expand_grid(params))
    if method == "optuna":
        require_optuna()
    elif args.enqueue:
        raise UsageError(f"--enqueue is for --optuna sweeps; a {method} sweep runs its own points")
    return SweepSpec(command=tuple(command), method=method, params=tuple(p.to_dict() for p in params),
                     trials=trials, objective=args.objective, direction=args.direction, reduce=args.reduce,
                     seed=args.seed, run_args=tuple(shlex.split(args.run_args)), name=args.name)


def run(args: argparse.Namespace) -> int:
    if args.root and is_store_url(args.root):
        raise UsageError(f"--root {args.root}: a sweep keeps its state in a local store folder; "
                         "sweep into a folder, then torchscope sync it")
    root = layout.resolve_root(args.root)
    spec = None if args.resume else _spec(args)
    extra: dict[str, object] = {"prune_startup_trials": args.prune_startup_trials,
                                "prune_warmup_steps": args.prune_warmup_steps}
    if spec is not None and args.enqueue:
        space = [Param(p["name"], p["kind"], p.get("low"), p.get("high"), tuple(p.get("choices") or ()))
                 for p in spec.params]
        extra["enqueue"] = [parse_point(point, space) for point in args.enqueue]
    try:
        state = run_sweep(root, spec, resume=args.resume, parallel=args.parallel, extra=extra)
    except KeyboardInterrupt:
        return 130
    if args.json:
        best = best_trial(state)
        out = {**state.to_dict(), "best_trial": best.to_dict() if best else None}
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0 if best_trial(state) is not None else 1
