"""A hand-written serving loop for the inference tests: requests arrive one list at a time and a
tiny model answers them. Flags switch the two habits the advisor checks (grad mode, eval mode),
and how the model is prepared (eager or TorchScript)."""
import argparse

import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 32),
                                  nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).softmax(-1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--grad", action="store_true", help="answer with grad mode on (no inference_mode)")
    ap.add_argument("--train-mode", action="store_true", help="never call model.eval()")
    ap.add_argument("--script", action="store_true", help="serve torch.jit.script(model)")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        serve(a)
    finally:
        torch.set_num_threads(threads)  # called in-process by the tests


def serve(a: argparse.Namespace) -> None:
    model = Scorer(16)
    if not a.train_mode:
        model.eval()
    server = torch.jit.script(model) if a.script else model
    queue = [torch.randn(a.batch, 16) for _ in range(a.requests)]
    answered = 0
    for request in queue:
        if a.grad:
            scores = server(request)
        else:
            with torch.inference_mode():
                scores = server(request)
        answered += scores.shape[0]
    print("answered", answered)


if __name__ == "__main__":
    main()
