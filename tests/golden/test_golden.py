"""Golden `--json` outputs of ls, analyze, advise and diff: the restructuring's safety net.

Recorded on the committed runs in tests/data/golden/runs and on the real traces in ../shared/data;
any change to these outputs is a change in behaviour, listed with its reason in
docs/architecture.md ("Golden outputs"). Regenerate after an intended change with
``TORCHSCOPE_GOLDEN_UPDATE=1 python -m pytest tests/golden`` and review the diff.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from app.cli import main
from app.data import trace_cache
from tests.conftest import SHARED_DATA

HERE = Path(__file__).parent
RUNS = HERE.parent / "data" / "golden" / "runs"
EXPECTED = HERE.parent / "data" / "golden" / "expected"
UPDATE = os.environ.get("TORCHSCOPE_GOLDEN_UPDATE") == "1"

GPU = "traces/gpu_before_after"
# name → argv; <R> is a copy of the committed store, <S> is ../shared/data.
CASES: dict[str, list[str]] = {
    "ls": ["ls", "--root", "<R>", "--json"],
    "analyze_run_name": ["analyze", "baseline", "--root", "<R>", "--json"],
    "analyze_run_folder": ["analyze", "<R>/20261201-115440-wide-88e7", "--json"],
    "advise_run": ["advise", "baseline", "--root", "<R>", "--json"],
    "diff_runs": ["diff", "baseline", "wide", "--root", "<R>", "--json"],
    "diff_runs_reversed": ["diff", "wide", "baseline", "--root", "<R>", "--json"],
    "analyze_gpu": ["analyze", f"<S>/{GPU}/control.json.gz", "--json"],
    "analyze_two_ranks": ["analyze", "<S>/traces/two_ranks", "--json"],
    "analyze_rocm": ["analyze", "<S>/traces/rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "--json"],
    "analyze_nccl": ["analyze", "<S>/traces/nccl_distributed/nccl_data.json.gz", "--json"],
    "analyze_cpu_only": ["analyze", "<S>/traces/cpu_only", "--json"],
    "analyze_triton": ["analyze", "<S>/traces/triton/triton_example.json.gz", "--json"],
    "analyze_event_sync": ["analyze", "<S>/traces/cuda_event_sync/event_sync_trace.json.gz", "--json"],
    "diff_gpu": ["diff", f"<S>/{GPU}/control.json.gz", f"<S>/{GPU}/test.json.gz", "--json"],
    "advise_gpu": ["advise", f"<S>/{GPU}/control.json.gz", "--json"],
    "advise_two_ranks": ["advise", "<S>/traces/two_ranks", "--json"],
}


@pytest.fixture(scope="module")
def golden_env(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("golden") / "runs"
    shutil.copytree(RUNS, root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(trace_cache.CACHE_ENV, str(tmp_path_factory.mktemp("golden_cache")))
        mp.delenv("TORCHSCOPE_RUNS", raising=False)
        yield root


def _normalise(text: str, root: Path) -> object:
    text = text.replace(str(root), "<R>").replace(str(SHARED_DATA.resolve()), "<S>")
    return json.loads(text.replace(str(SHARED_DATA), "<S>"))


def _close(a: object, b: object, where: str = "$") -> list[str]:
    """Paths where a and b differ; floats compared to 1e-9 relative (platform libm noise)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: only in {'expected' if k in a else 'actual'}" for k in a.keys() ^ b.keys()]
        for k in a.keys() & b.keys():
            out += _close(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items expected, {len(b)} found"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _close(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float | int) and not isinstance(b, bool):
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) else [f"{where}: {a!r} != {b!r}"]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_json(case: str, golden_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.replace("<R>", str(golden_env)).replace("<S>", str(SHARED_DATA)) for a in CASES[case]]
    if "<S>" in " ".join(CASES[case]) and not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent")
    rc = main(argv)
    out = capsys.readouterr().out
    actual = {"exit_code": rc, "output": _normalise(out, golden_env)}
    path = EXPECTED / f"{case}.json"
    if UPDATE:
        EXPECTED.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    differences = _close(expected, actual)
    assert not differences, f"{case}: {len(differences)} differences, first: {differences[:8]}"
