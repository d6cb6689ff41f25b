"""Per-step Overview numbers: Torchscope vs torch-tb-profiler's own parser, on the shared traces.

    .venv/bin/pip install torch-tb-profiler      # not a project dependency
    .venv/bin/python benchmarks/tb_profiler_compare.py

The released torch-tb-profiler (0.4.3) predates two fixes on kineto's master, whose rules
Torchscope follows: ``cuda_runtime`` (and the other ``*_runtime`` categories) count as Runtime,
and every ``user_annotation`` is an operator (so ``enumerate(DataLoader)…`` spans count as
DataLoader). The script applies those two fixes to the installed parser before running it, and
runs Torchscope with ``nccl_by_name=False`` (tb-profiler's Communication rule). It prints, per
step, tb-profiler's costs, ours, and the largest difference; then, per trace, how many ops differ
in call count or device self time between tb-profiler's operator view and ``compute_op_table``.
"""
from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / ".." / "shared" / "data" / "traces"
CATEGORIES = ["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"]


def _patch_to_master() -> None:
    from torch_tb_profiler.profiler import trace as tb

    for cat in ("cuda_runtime", "mtia_runtime", "glow_runtime", "xpu_runtime", "privateuse1_runtime"):
        tb.EventTypeMap.setdefault(cat, tb.EventTypes.RUNTIME)
    original = tb.create_trace_event

    def create(event, is_pytorch_lightning):  # noqa: ANN001, ANN202 - tb-profiler's signature
        made = original(event, is_pytorch_lightning)
        if made is None and tb.EventTypeMap.get(str(event.get("cat", "")).lower()) == tb.EventTypes.USER_ANNOTATION:
            return tb.OperatorEvent(tb.EventTypes.USER_ANNOTATION, event)
        return made

    tb.create_trace_event = create


def compare(path: Path) -> float:
    from torch_tb_profiler.profiler.data import RunProfileData

    sys.path.insert(0, str(ROOT))
    from app.analysis.trace.steps import compute_steps
    from app.data.trace import load_trace

    prof = RunProfileData.parse("w", "span", str(path), tempfile.mkdtemp())
    ours = compute_steps([load_trace(path, use_cache=False)], nccl_by_name=False)
    worst = 0.0
    print(f"{path.parent.name}/{path.name}: tb steps {prof.steps_names}, ours {list(ours['step'])}")
    for i, costs in enumerate(prof.steps_costs[: len(ours)]):
        row = ours.iloc[i]
        mine = [float(row[f"{c}_us"]) for c in CATEGORIES] + [float(row["duration_us"])]
        worst = max(worst, max(abs(a - b) for a, b in zip(mine, costs.costs)))
        print(f"  step {prof.steps_names[i]:>5} tb   ", " ".join(f"{v:10.1f}" for v in costs.costs))
        print("              ours ", " ".join(f"{v:10.1f}" for v in mine))
    print(f"  largest difference {worst:.3f} µs")
    return worst


def compare_ops(path: Path) -> None:
    """Operator view: calls, host total and device self time per op name, tb-profiler vs ours."""
    from torch_tb_profiler.profiler.data import RunProfileData

    sys.path.insert(0, str(ROOT))
    from app.analysis.trace.ops import compute_op_table
    from app.data.trace import load_trace

    prof = RunProfileData.parse("w", "span", str(path), tempfile.mkdtemp())
    ours = compute_op_table([load_trace(path, use_cache=False)]).set_index("name")
    calls = device = 0
    examples = []
    for op in prof.op_list_groupby_name:
        if op.name not in ours.index:
            continue
        row = ours.loc[op.name]
        calls += int(row["calls"] != op.calls)
        if abs(row["device_self_us"] - op.self_device_duration) > 1:
            device += 1
            examples.append(f"{op.name}: ours {row['device_self_us']:.1f} tb {op.self_device_duration:.1f}")
    print(f"{path.parent.name}/{path.name}: {len(prof.op_list_groupby_name)} ops; calls differ for {calls}, "
          f"device self time for {device}", *examples[:3], sep="\n  ")


def main() -> None:
    logging.disable(logging.WARNING)
    _patch_to_master()
    print("columns:", " ".join(CATEGORIES), "total")
    for path in sorted(TRACES.glob("*/*.json.gz")):
        compare(path)
    print("\noperator view")
    for path in sorted(TRACES.glob("*/*.json.gz")):
        compare_ops(path)


if __name__ == "__main__":
    main()
