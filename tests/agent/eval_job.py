"""A nanoGPT-style training script for the agent's evaluation tests; knows nothing of Torchscope.

Hand-written loop over a token tensor (``get_batch``), a tiny causal bigram-MLP language model,
AdamW with a warm-up + cosine schedule set by hand every iteration, gradient clipping, and an
evaluation every ``--eval-every`` iterations at the top of the loop (as nanoGPT does, so
iteration 0 evaluates before any training). Evaluation styles (``--eval``):

- ``eval_mode``: ``model.eval()`` + ``torch.no_grad()``;
- ``nograd_train``: ``torch.no_grad()`` with the model left in train mode;
- ``grad_train``: neither (forwards whose outputs no backward ever reaches);
- ``noloss``: ``model.eval()`` + ``no_grad``, accuracy only, no loss computed at all.

``--loss-in model`` computes ``F.cross_entropy`` inside ``forward`` (nanoGPT); ``loop`` in the
training loop. Prints ``eval <iter> <val_loss>`` for each evaluation, ``done`` at the end.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

VOCAB = 32


class TinyLM(nn.Module):
    def __init__(self, width: int, loss_in_model: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Dropout(0.1),
                                 nn.Linear(2 * width, VOCAB))
        self.loss_in_model = loss_in_model

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):  # noqa: ANN201
        logits = self.mlp(self.embed(idx))
        if targets is None or not self.loss_in_model:
            return logits
        return logits, F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def main(argv: Sequence[str] | None = None) -> dict[int, float]:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=12)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--eval-iters", type=int, default=3)
    p.add_argument("--eval", choices=["eval_mode", "nograd_train", "grad_train", "noloss"],
                   default="eval_mode")
    p.add_argument("--loss-in", choices=["model", "loop"], default="model")
    p.add_argument("--final-eval", action="store_true", help="evaluate once more after the last step")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = torch.randint(0, VOCAB, (2000,), generator=torch.Generator().manual_seed(1))
    split = {"train": data[:1600], "val": data[1600:]}
    gen = torch.Generator().manual_seed(2)

    def get_batch(which: str) -> tuple[torch.Tensor, torch.Tensor]:
        d = split[which]
        ix = torch.randint(len(d) - args.block - 1, (args.batch,), generator=gen)
        x = torch.stack([d[i:i + args.block] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + args.block] for i in ix])
        return x, y

    model = TinyLM(16, loss_in_model=args.loss_in == "model")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)

    def get_lr(it: int) -> float:
        warmup = 2
        if it < warmup:
            return args.lr * (it + 1) / warmup
        ratio = (it - warmup) / max(1, args.iters - warmup)
        return 0.1 * args.lr + 0.5 * (1 + math.cos(math.pi * min(1.0, ratio))) * 0.9 * args.lr

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if args.loss_in == "model":
            return model(x, y)[1]
        logits = model(x)
        return F.cross_entropy(logits.view(-1, VOCAB), y.view(-1))

    def evaluate() -> float:
        if args.eval in ("eval_mode", "noloss"):
            model.eval()
        losses = []
        with torch.set_grad_enabled(args.eval == "grad_train"):
            for _ in range(args.eval_iters):
                x, y = get_batch("val")
                if args.eval == "noloss":
                    logits = model(x)
                    losses.append(float((logits.argmax(-1) == y).float().mean()))
                else:
                    losses.append(float(loss_of(x, y).detach()))
        model.train()
        return sum(losses) / len(losses)

    evals: dict[int, float] = {}
    for it in range(args.iters):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        if it % args.eval_every == 0:
            evals[it] = evaluate()
            print(f"eval {it} {evals[it]:.6f}", flush=True)
        x, y = get_batch("train")
        loss = loss_of(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    if args.final_eval:
        evals[args.iters] = evaluate()
        print(f"eval {args.iters} {evals[args.iters]:.6f}", flush=True)
    print("done", flush=True)
    return evals


if __name__ == "__main__":
    main()
