"""Issue 17's sweep acceptance at full size: a 4-trial grid, an 8-trial random and a 10-trial Optuna
sweep of a small CPU script, each SIGKILLed mid-sweep and resumed.

    python -m benchmarks.sweeps                       # the three sweeps, torch job (~1-2 min quiet)
    python -m benchmarks.sweeps --job stdlib          # the tests' pure-Python job (no torch import)
    python -m benchmarks.sweeps --parts optuna        # one sweep only

Every trial is a real ``torchscope run``. The ``torch`` job (``python -m benchmarks.sweeps job``)
is a linear model trained by hand-written minibatch SGD with a functional loss, logging
``val_loss`` after every epoch through the agent's API (``profiler_agent.Run().log``); the
``stdlib`` job is tests/sweep/trial_job.py. For each sweep the benchmark waits until one trial
has finished and another is running, SIGKILLs the sweep, checks that the interrupted trial's run
ends ``killed``, resumes with ``torchscope sweep --resume ID`` and records: trials per state, the
best trial, the runs made (trials + interrupted ones), whether every trial finished before the
kill kept its run, and the CPU seconds of all the processes (RUSAGE_CHILDREN). Results go to
benchmarks/results/sweeps.json and a markdown table on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
STDLIB_JOB = [sys.executable, str(PROJECT / "tests" / "sweep" / "trial_job.py")]
TORCH_JOB = [sys.executable, "-m", "benchmarks.sweeps", "job"]

# name → (method arguments, job arguments); lr on a log scale, batch size a choice.
SWEEPS: dict[str, tuple[list[str], list[str]]] = {
    "grid": (["--grid", "lr=0.3,0.03", "--grid", "batch_size=16,64"], []),
    "random": (["--random", "8", "--param", "lr=loguniform:1e-3:1", "--param", "batch_size=choice:16,64"], []),
    "optuna": (["--optuna", "10", "--param", "lr=loguniform:1e-3:1", "--param", "batch_size=choice:16,64",
                "--prune-startup-trials", "3"], []),
}


def job() -> None:
    """The torch trial job: python -m benchmarks.sweeps job --lr LR --batch-size B [--epochs E]."""
    p = argparse.ArgumentParser()
    p.add_argument("job")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--epoch-s", type=float, default=0.1)
    args = p.parse_args()
    import torch
    import torch.nn.functional as F

    import profiler_agent

    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 16, generator=g)
    y = x @ torch.randn(16, 1, generator=g) + 0.1 * torch.randn(512, 1, generator=g)
    w = torch.zeros(16, 1, requires_grad=True)
    opt = torch.optim.SGD([w], lr=args.lr)
    with profiler_agent.Run() as run:
        for _ in range(args.epochs):
            start = time.monotonic()
            for i in range(0, 384, args.batch_size):
                loss = F.mse_loss(x[i:i + args.batch_size] @ w, y[i:i + args.batch_size])
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                run.log(val_loss=min(F.mse_loss(x[384:] @ w, y[384:]).item(), 1e30))
            time.sleep(max(0.0, args.epoch_s - (time.monotonic() - start)))


def _states(root: Path) -> list[Any]:
    from app.workspace.sweep_state import list_sweeps

    return list(list_sweeps(root)) if root.is_dir() else []


def _one(name: str, job_cmd: list[str], workdir: Path) -> dict[str, Any]:
    from app.workspace.sweep_state import read_sweep
    from app.workspace.sweep_view import load_sweep_view
    from profiler_agent import runformat as rf

    method, extra_job = SWEEPS[name]
    root = workdir / name
    run_args = ["--run-args", "--no-profile --no-graph"]
    cmd = [sys.executable, "-m", "app.cli", "sweep", "--root", str(root), *run_args, *method, "--",
           *job_cmd, "--lr", "{lr}", "--batch-size", "{batch_size}", *extra_job]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killed_at = None
    while proc.poll() is None:
        states = _states(root)
        trials = states[0].trials if states else ()
        done = sum(t.state in ("complete", "pruned", "failed") for t in trials)
        if done >= 1 and any(t.state == "running" and t.run_id for t in trials):
            proc.send_signal(signal.SIGKILL)
            killed_at = done
            break
        time.sleep(0.05)
    proc.wait()
    sid = _states(root)[0].id
    before = read_sweep(root, sid)
    kept = {t.number: t.run_id for t in before.trials if t.state in ("complete", "pruned", "failed")}
    cut = [t for t in before.trials if t.state == "running"]
    for t in cut:  # the launcher got SIGTERM when the sweep died: wait for its run's final status
        while rf.read_manifest(root / str(t.run_id)).status is rf.RunStatus.RUNNING:
            time.sleep(0.05)
    cut_status = [str(rf.read_manifest(root / str(t.run_id)).status) for t in cut]
    code = subprocess.call([sys.executable, "-m", "app.cli", "sweep", "--root", str(root), "--resume", sid],
                           cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = read_sweep(root, sid)
    view = load_sweep_view(root, sid)
    counts = dict(view.trials.counts)
    best = view.trials.best
    return {
        "sweep": name, "id": sid, "planned": after.spec.trials, "killed_after_trials": killed_at,
        "interrupted_run_status": cut_status, "resume_exit_code": code, "state": after.state,
        "trials_by_state": counts, "runs_made": len(rf.list_runs(root).runs),
        "finished_trials_kept": all(after.trial(n) is not None and after.trial(n).run_id == r  # type: ignore[union-attr]
                                    for n, r in kept.items()),
        "best_trial": None if best is None else {"trial": best["trial"], "objective": best["objective"],
                                                 "params": {p: best[p] for p in view.trials.params},
                                                 "run": best["id"]},
        "importance": dict(view.importance) if view.importance else view.importance_note,
        "wall_s": round(time.monotonic() - t0, 1),
    }


def main() -> None:
    if sys.argv[1:2] == ["job"]:
        job()
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", nargs="*", choices=list(SWEEPS), default=list(SWEEPS))
    p.add_argument("--job", choices=("torch", "stdlib"), default="torch")
    p.add_argument("--out", type=Path, default=PROJECT / "benchmarks" / "results" / "sweeps.json")
    args = p.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")])
    job_cmd = TORCH_JOB if args.job == "torch" else STDLIB_JOB
    results = []
    with tempfile.TemporaryDirectory(prefix="torchscope-sweeps-") as tmp:
        for name in args.parts:
            cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = _one(name, job_cmd, Path(tmp))
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            r["cpu_s"] = round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 1)
            results.append(r)
    out = {"job": args.job, "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 1), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print("| sweep | trials | killed after | interrupted run | by state | runs made | kept | best | CPU s | wall s |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        b = r["best_trial"] or {}
        shown = ", ".join(f"{k.removeprefix('param.')}={v:.3g}" if isinstance(v, float) else f"{k.removeprefix('param.')}={v}"
                          for k, v in (b.get("params") or {}).items())
        print(f"| {r['sweep']} | {r['planned']} | {r['killed_after_trials']} | {', '.join(r['interrupted_run_status'])} "
              f"| {', '.join(f'{n} {k}' for k, n in r['trials_by_state'].items())} | {r['runs_made']} "
              f"| {r['finished_trials_kept']} | trial {b.get('trial')}: {b.get('objective', float('nan')):.4g} ({shown}) "
              f"| {r['cpu_s']} | {r['wall_s']} |")


if __name__ == "__main__":
    main()
