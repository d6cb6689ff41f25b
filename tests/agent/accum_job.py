"""A nanoGPT-style script with gradient accumulation, for the agent's tests; knows nothing of Torchscope.

As nanoGPT's ``train.py``: a tiny GPT (token + position embeddings, one causal self-attention
block, tied head) whose ``forward(idx, targets)`` returns ``(logits, loss)`` with
``F.cross_entropy``; ``get_batch`` slicing a token tensor; AdamW with a warm-up + cosine schedule
set by hand every iteration; ``--accum`` micro-batches per optimizer step, each loss divided by
the number of micro-steps before ``backward()``; gradient clipping; ``estimate_loss()`` under
``model.eval()`` every ``--eval-every`` iterations at the top of the loop (iteration 0 included),
with ``torch.no_grad()`` or, to test the advisor, ``torch.enable_grad()`` (``--eval-grad``).

Prints ``step <iter> loss <mean of the undivided micro-batch losses>`` after each optimizer step,
``eval <iter> <val_loss>`` for each evaluation and ``done`` at the end.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

VOCAB = 48


class TinyGPT(nn.Module):
    def __init__(self, block: int, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, width)
        self.wpe = nn.Embedding(block, width)
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as nanoGPT
        mask = torch.triu(torch.ones(block, block, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):  # noqa: ANN201
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask[:t, :t], need_weights=False)[0]
        x = x + self.mlp(self.ln_2(x))
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        return logits, loss


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=16)
    p.add_argument("--accum", type=int, default=3, help="gradient_accumulation_steps")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--eval-every", type=int, default=6)
    p.add_argument("--eval-iters", type=int, default=2)
    p.add_argument("--eval-grad", choices=["no_grad", "enable_grad"], default="no_grad")
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = torch.randint(0, VOCAB, (4000,), generator=torch.Generator().manual_seed(1))
    splits = {"train": data[:3600], "val": data[3600:]}
    gen = torch.Generator().manual_seed(2)

    def get_batch(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        d = splits[split]
        ix = torch.randint(len(d) - args.block - 1, (args.batch,), generator=gen)
        x = torch.stack([d[i:i + args.block] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + args.block] for i in ix])
        return x, y

    model = TinyGPT(args.block)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)

    def get_lr(it: int) -> float:
        warmup = 2
        if it < warmup:
            return args.lr * (it + 1) / warmup
        ratio = (it - warmup) / max(1, args.iters - warmup)
        return 0.1 * args.lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio))) * 0.9 * args.lr

    def estimate_loss() -> float:
        model.eval()
        losses = []
        with torch.no_grad() if args.eval_grad == "no_grad" else torch.enable_grad():
            for _ in range(args.eval_iters):
                x, y = get_batch("val")
                _, loss = model(x, y)
                losses.append(loss.item())
        model.train()
        return sum(losses) / len(losses)

    x, y = get_batch("train")
    for it in range(args.iters):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        if it % args.eval_every == 0:
            print(f"eval {it} {estimate_loss():.8f}", flush=True)
        micro = []
        for _ in range(args.accum):
            _, loss = model(x, y)
            micro.append(loss.item())
            loss = loss / args.accum  # scale the loss to account for gradient accumulation
            x, y = get_batch("train")
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {it} loss {sum(micro) / len(micro):.8f}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
