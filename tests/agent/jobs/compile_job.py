"""A tiny torch.compile training job for the tests: a graph break in forward, a recompile at step 10.

    python compile_job.py [--steps 16] [--print-graph-break]

The model's forward calls ``.item()`` on an intermediate (a graph break: dynamo cannot trace a
tensor read into a Python number) and the batch grows from 8 to 12 samples at step 10 (a guard
on the static shape fails, so dynamo recompiles). Backend ``eager`` keeps compiling fast on CPU.
"""
from __future__ import annotations

import argparse

import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if h.mean().item() > 1e9:  # graph break: a tensor read into Python
            h = h * 0
        return self.b(h)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net()
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        batch = 8 if step < 10 else 12
        x, y = torch.randn(batch, 16), torch.randint(0, 4, (batch,))
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        opt.step()
    print(f"done {args.steps} steps")


if __name__ == "__main__":
    main()
