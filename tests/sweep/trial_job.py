"""A tiny CPU training job for the sweep tests: a hand-written loop, a functional loss, val_loss per epoch.

``python trial_job.py --lr 0.1 --batch-size 32 --epochs 8``: a linear model fitted by minibatch
SGD to a fixed random regression (pure Python: no torch to import, so a trial costs ~0.4 s of CPU
under ``torchscope run``). After every epoch it appends ``{"step", "val_loss"}`` to the run's
metrics.jsonl with the run format's writer, in the folder the launcher gives the job
(``TORCHSCOPE_RUN_DIR``), as the agent's ``run.log(val_loss=...)`` would. A learning rate above
~1 diverges (val_loss grows), which gives the pruner something to stop. ``--epoch-s`` paces the
epochs (sleeping, no CPU) so that a test can act while a trial runs.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import time
from collections.abc import Iterator

from profiler_agent.runformat import JsonlWriter, layout


def _mse(w: list[float], xs: list[list[float]], ys: list[float]) -> float:
    """The functional loss: mean squared error of the linear model ``w``."""
    total = 0.0
    for x, y in zip(xs, ys, strict=True):
        err = sum(wi * xi for wi, xi in zip(w, x, strict=True)) - y
        total += err * err
    return total / len(xs)


def _grad(w: list[float], xs: list[list[float]], ys: list[float]) -> list[float]:
    g = [0.0] * len(w)
    for x, y in zip(xs, ys, strict=True):
        err = sum(wi * xi for wi, xi in zip(w, x, strict=True)) - y
        for j, xj in enumerate(x):
            g[j] += 2.0 * err * xj / len(xs)
    return g


def val_losses(lr: float, batch_size: int, epochs: int) -> Iterator[float]:
    """The job's val_loss after each epoch (the curve the pruner sees; the pruning study replays it)."""
    rng = random.Random(0)
    w_true = [rng.gauss(0, 1) for _ in range(4)]
    xs = [[rng.gauss(0, 1) for _ in range(4)] for _ in range(192)]
    ys = [sum(a * b for a, b in zip(w_true, x, strict=True)) + 0.1 * rng.gauss(0, 1) for x in xs]
    train_x, train_y, val_x, val_y = xs[:128], ys[:128], xs[128:], ys[128:]
    w = [0.0] * 4
    for _ in range(epochs):
        for i in range(0, len(train_x), batch_size):
            g = _grad(w, train_x[i:i + batch_size], train_y[i:i + batch_size])
            w = [wi - lr * gi for wi, gi in zip(w, g, strict=True)]
            w = [wi if math.isfinite(wi) and abs(wi) < 1e12 else 1e12 for wi in w]
        yield _mse(w, val_x, val_y)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--epoch-s", type=float, default=0.0, help="wall seconds each epoch lasts at least")
    p.add_argument("--fail", type=int, default=0, help="exit with this code before training")
    args = p.parse_args()
    if args.fail:
        raise SystemExit(args.fail)
    run_dir = os.environ.get("TORCHSCOPE_RUN_DIR")
    log = JsonlWriter(os.path.join(run_dir, layout.METRICS)) if run_dir else None
    t0 = time.time()
    start = time.monotonic()
    for epoch, val in enumerate(val_losses(args.lr, args.batch_size, args.epochs)):
        if log is not None:
            log.write({"step": epoch, "time": time.time() - t0, "rank": 0, "val_loss": val})
        else:
            print(f"epoch {epoch} val_loss {val:.6g}")
        time.sleep(max(0.0, args.epoch_s - (time.monotonic() - start)))
        start = time.monotonic()
    if log is not None:
        log.close()


if __name__ == "__main__":
    main()
