"""Sample inference job: a small CNN classifier served eager, as TorchScript, or torch.compile'd.

Plain argparse + PyTorch; knows nothing about Torchscope. The model is built from its config
(``--width``, ``--depth``, ``--image-size``), put in eval mode and called under
``torch.inference_mode()`` (autograd on with ``--no-inference-mode``) on seeded synthetic
images, ``--calls`` times with ``--batch-size`` images each. Under ``torchscope run`` each call is one step of an inference run (latency per
call and per sample, p50/p90/p99; docs/agent.md "Inference runs").

``--mode compile`` needs a working torch.compile backend (inductor compiles C++ on a CPU). When
it cannot compile, the job says why on stderr and exits with status 3, so the recorded run is
``failed`` with the reason in its logs; nothing is silently measured eager instead.

    torchscope run --name eager -- python sample_models/infer.py --mode eager
    torchscope run --name script -- python sample_models/infer.py --mode torchscript
    torchscope run --name compiled -- python sample_models/infer.py --mode compile
    torchscope diff eager script
    torchscope run --name eager-grad -- python sample_models/infer.py --mode eager --no-inference-mode
    torchscope advise eager-grad       # inference_grad_enabled: the calls ran with autograd on
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

MODES = ("eager", "torchscript", "compile")
COMPILE_FAILED = 3  # exit status when --mode compile cannot compile here


class SmallCNN(nn.Module):
    """conv-bn-relu blocks, global pooling and a linear head; sizes from the config."""

    def __init__(self, width: int, depth: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for i in range(depth):
            cout = width * (2 ** min(i, 2))
            layers += [nn.Conv2d(cin, cout, 3, stride=2 if i else 1, padding=1, bias=False), nn.BatchNorm2d(cout),
                       nn.ReLU(inplace=True)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def prepare(model: nn.Module, mode: str, example: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """The callable that serves ``model`` in ``mode`` (raises ValueError for an unknown mode)."""
    if mode == "eager":
        return model
    if mode == "torchscript":
        return torch.jit.script(model)
    if mode == "compile":
        return torch.compile(model)  # type: ignore[return-value]
    raise ValueError(f"unknown --mode {mode!r}; valid: {', '.join(MODES)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=MODES, default="eager")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1: steadier latency)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-inference-mode", action="store_true",
                    help="serve with autograd on (the habit the advisor's inference_grad_enabled check finds)")
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    model = SmallCNN(a.width, a.depth, a.classes).eval()
    images = torch.randn(a.calls, a.batch_size, 3, a.image_size, a.image_size)
    server = prepare(model, a.mode, images[0])
    started = time.perf_counter()
    predicted = 0
    with contextlib.nullcontext() if a.no_inference_mode else torch.inference_mode():
        for i in range(a.calls):
            try:
                logits = server(images[i])
            except Exception as e:  # torch.compile compiles at the first call; no backend here
                if a.mode != "compile" or i:
                    raise
                print(f"infer.py: torch.compile could not compile on this machine ({type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''}); no compiled run was measured", file=sys.stderr)
                return COMPILE_FAILED
            predicted += int(logits.shape[0])
    elapsed = time.perf_counter() - started
    print(f"mode={a.mode} calls={a.calls} samples={predicted} wall={elapsed:.2f}s "
          f"({predicted / elapsed:.0f} samples/s including the first calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
