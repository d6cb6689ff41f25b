"""Test helper: record traces with module scopes as the agent writes them (record_function ranges
named ``nn.Module: <label>`` around every module's forward; docs/trace-engine.md)."""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def module_ranges(model: Any) -> Iterator[None]:
    """Wrap every module's forward in an ``nn.Module: <label>`` record_function range: the
    qualified name inside ``model`` (``(model)`` for the model), the class name outside it."""
    import torch
    from torch.profiler import record_function

    names = {m: (n or "(model)") for n, m in model.named_modules()}
    open_ranges: dict[int, list[Any]] = {}

    def pre(m: Any, _args: object) -> None:
        r = record_function(f"nn.Module: {names.get(m, type(m).__name__)}")
        r.__enter__()
        open_ranges.setdefault(id(m), []).append(r)

    def post(m: Any, _args: object, _out: object) -> None:
        open_ranges[id(m)].pop().__exit__(None, None, None)

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
             torch.nn.modules.module.register_module_forward_hook(post)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def record_module_trace(out: Path, *, agent_ranges: bool = True, with_stack: bool = False, active: int = 2,
                        width: int = 32) -> dict[str, list[float]]:
    """Profile ``active`` steps (forward, backward, SGD step) of ``Sequential(Sequential(Linear,
    ReLU), Linear)`` with a CrossEntropyLoss module into ``out``; return torch's key_averages
    (key → [count, self_cpu_time_total, cpu_time_total, is_user_annotation])."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    expected: dict[str, list[float]] = {}

    def on_ready(p: Any) -> None:
        p.export_chrome_trace(str(out))
        for e in p.key_averages():
            expected[e.key] = [e.count, e.self_cpu_time_total, e.cpu_time_total, bool(e.is_user_annotation)]

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU()),
                                torch.nn.Linear(width, 4))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ranges = module_ranges(model) if agent_ranges else contextlib.nullcontext()
    with warnings.catch_warnings(), ranges, profile(
            activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=active),
            record_shapes=True, with_stack=with_stack, on_trace_ready=on_ready) as prof:
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(2 + active):
            opt.zero_grad()
            x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
            loss_fn(model(x), y).backward()
            opt.step()
            prof.step()
    return expected
