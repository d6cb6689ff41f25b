"""A tiny job that logs only through TensorBoard's SummaryWriter (for test_tensorboard.py).

Written in a style unlike sample_models/: a bare parameter tensor trained with a functional loss,
no nn.Module loss, no argparse; `Loss/train` every optimizer step and `Accuracy/val` every
third, both with an explicit global_step, plus one add_scalars call per evaluation.
"""
import sys

import torch
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter

STEPS = 9
EVAL_EVERY = 3


def main(log_dir: str) -> None:
    torch.manual_seed(0)
    weight = torch.zeros(4, 3, requires_grad=True)
    opt = torch.optim.SGD([weight], lr=0.5)
    x = torch.randn(32, 4)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    writer = SummaryWriter(log_dir)
    for step in range(STEPS):
        loss = F.cross_entropy(x @ weight, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        writer.add_scalar("Loss/train", loss.detach(), global_step=step)  # a tensor: kept unread
        if step % EVAL_EVERY == EVAL_EVERY - 1:
            with torch.no_grad():
                accuracy = ((x @ weight).argmax(1) == y).float().mean().item()
            writer.add_scalar("Accuracy/val", accuracy, step)
            writer.add_scalars("Eval", {"acc": accuracy, "err": 1 - accuracy}, step)
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1])
