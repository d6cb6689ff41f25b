"""Real torch.profiler memory timelines for tests: a tiny MLP trained a few steps on CPU,
profiled as the agent's ``--memory-timeline`` windows are (record_shapes, profile_memory,
with_stack), exported with ``export_memory_timeline`` to the run format's ``.raw.json.gz``."""
from __future__ import annotations

import warnings
from pathlib import Path

from profiler_agent.runformat import layout

__all__ = ["mlp_param_bytes", "record_memory_timeline", "add_memory_timeline"]

IN, OUT = 64, 10


def mlp_param_bytes(hidden: int) -> int:
    """Bytes of the float32 parameters of the MLP ``record_memory_timeline`` trains."""
    return 4 * (IN * hidden + hidden + hidden * OUT + OUT)


def record_memory_timeline(path: Path, *, hidden: int, batch: int = 32, steps: int = 3) -> Path:
    """Train Linear(64, hidden) → ReLU → Linear(hidden, 10) with SGD + momentum for ``steps``
    steps under the profiler and write the raw memory timeline of the CPU to ``path``."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(IN, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, OUT))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, IN), torch.randint(0, OUT, (batch,))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                profile_memory=True, with_stack=True) as prof:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            prof.step()
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        prof.export_memory_timeline(str(path), device="cpu")
    return path


def add_memory_timeline(run_dir: Path, source: Path, *, rank: int = 0, time_ns: int = 1) -> Path:
    """Copy a recorded timeline into ``run_dir/memory/`` under the agent's file name."""
    worker = layout.worker_name("host", 1, rank)
    dst = Path(run_dir) / layout.MEMORY_DIR / layout.memory_timeline_file_name(worker, time_ns)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(Path(source).read_bytes())
    return dst
