"""How many trials Optuna's MedianPruner prunes in the sweep tests' Optuna sweep, over many seeds.

    python -m benchmarks.sweep_pruning                        # the test's setup, seeds 0-19
    python -m benchmarks.sweep_pruning --enqueue ''           # the same without its first trial
    python -m benchmarks.sweep_pruning --seeds 50 --trials 4 --startup 1 --warmup 0 \\
        --param lr=loguniform:1e-3:0.5 --param batch_size=choice:16,64 --epochs 6

The test (tests/sweep/test_sweep_runs.py) must prune at least one trial whatever the seed. A
real sweep per seed would cost ~0.5 s of CPU a trial (one ``torchscope run`` each); this replays
the same decisions in one process in milliseconds: the study comes from the sweep runner's own
factory (``sweep_runner.load_study``: TPE seeded by ``--seed``, MedianPruner with the startup and
warm-up settings, the ``--enqueue`` points first; Optuna's in-memory storage, or ``--sqlite`` for
the sweep's own kind of file), each trial's values are the trial job's own val_loss curve
(``tests/sweep/trial_job.val_losses``, the job's code, not a model of it), reported one evaluation
at a time with ``should_prune`` after each, as ``_Sweep.watch`` does, and a complete trial is told
its objective as ``compute_objective`` reduces it. Trials run one at a time (the test's
``--parallel 1``), so the decisions are those of the real sweep exactly.

Prints the number of pruned trials per seed and their distribution; ``--json`` writes it too.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]

# The test's setup (test_optuna_sweep_prunes_and_the_view_shows_it).
TEST_PARAMS = ["lr=loguniform:1e-3:3", "batch_size=choice:16,64"]
# The test's first trial: the space's best first-epoch val_loss (tests/sweep/trial_job.py).
TEST_ENQUEUE = ["lr=0.185,batch_size=16"]


def replay(seed: int, *, trials: int = 3, startup: int = 1, warmup: int = 0, params: list[str] | None = None,
           epochs: int = 6, enqueue: list[str] | None = None, sqlite: bool = False) -> list[str]:
    """The state of each trial ("complete" or "pruned at evaluation K") of one seeded sweep, the
    test's setup by default. ``sqlite`` keeps the study in a SQLite file as the sweep does (the
    decisions are the same; Optuna's in-memory storage is ~100x cheaper)."""
    import optuna

    from app.analysis.sweep_space import compute_objective, parse_param, parse_point
    from app.workspace.sweep_runner import distributions, load_study
    from app.workspace.sweep_state import SweepSpec, SweepState, sweep_id, sweeps_dir
    from tests.sweep.trial_job import val_losses

    space = [parse_param(p) for p in (TEST_PARAMS if params is None else params)]
    points = [parse_point(e, space) for e in (TEST_ENQUEUE if enqueue is None else enqueue)]
    spec = SweepSpec(command=("job", *(f"{{{p.name}}}" for p in space)), method="optuna",
                     params=tuple(p.to_dict() for p in space), trials=trials, seed=seed)
    state = SweepState(id=sweep_id(spec), spec=spec, created_at=time.time(),
                       extra={"prune_startup_trials": startup, "prune_warmup_steps": warmup, "enqueue": points})
    out = []
    with tempfile.TemporaryDirectory(prefix="torchscope-prune-") as tmp:
        root = Path(tmp)
        sweeps_dir(root).mkdir(parents=True)
        study = load_study(root, state, storage=None if sqlite else optuna.storages.InMemoryStorage())
        for _ in range(trials):
            t = study.ask(distributions(space))
            records: list[dict[str, Any]] = []
            pruned_at = None
            for k, value in enumerate(val_losses(float(t.params.get("lr", 0.1)), int(t.params.get("batch_size", 32)),
                                                 epochs)):
                records.append({"step": k, "rank": 0, "val_loss": value})
                t.report(value, k)  # numbered by evaluation, as _Sweep.watch reports them
                if t.should_prune():
                    pruned_at = k
                    break
            if pruned_at is None:
                study.tell(t, compute_objective(records, "val_loss", direction="min", reduce="best"))
                out.append("complete")
            else:
                study.tell(t, state=optuna.trial.TrialState.PRUNED)
                out.append(f"pruned at evaluation {pruned_at}")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 (20)")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--startup", type=int, default=1, help="--prune-startup-trials (1)")
    p.add_argument("--warmup", type=int, default=0, help="--prune-warmup-steps (0)")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--param", action="append", default=None, help="as torchscope sweep --param (the test's)")
    p.add_argument("--enqueue", action="append", default=None, help="as torchscope sweep --enqueue (the test's)")
    p.add_argument("--sqlite", action="store_true", help="keep each study in a SQLite file, as the sweep does")
    p.add_argument("--json", type=Path, help="write the result here")
    p.add_argument("--quiet", action="store_true", help="only the distribution")
    args = p.parse_args(argv)
    params = args.param or TEST_PARAMS
    enqueue = TEST_ENQUEUE if args.enqueue is None else [e for e in args.enqueue if e]
    per_seed = {s: replay(s, trials=args.trials, startup=args.startup, warmup=args.warmup, params=params,
                          epochs=args.epochs, enqueue=enqueue, sqlite=args.sqlite) for s in range(args.seeds)}
    pruned = {s: sum(x.startswith("pruned") for x in v) for s, v in per_seed.items()}
    dist = dict(sorted(collections.Counter(pruned.values()).items()))
    if not args.quiet:
        for s, v in per_seed.items():
            print(f"seed {s}: {pruned[s]} pruned  ({'; '.join(v)})")
    print(f"{args.trials} trials, startup {args.startup}, warm-up {args.warmup}, {' '.join(params)}, "
          f"{args.epochs} epochs, enqueue {enqueue or 'none'}, seeds 0-{args.seeds - 1}: pruned trials -> seeds {dist}; "
          f"min {min(pruned.values())}, seeds with none: {[s for s, n in pruned.items() if n == 0]}")
    result = {"trials": args.trials, "startup": args.startup, "warmup": args.warmup, "params": params,
              "enqueue": enqueue,
              "epochs": args.epochs, "pruned_per_seed": pruned, "distribution": dist, "states": per_seed}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(PROJECT))
    main()
