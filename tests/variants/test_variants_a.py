"""Sample variants of precision, memory and the optimizer step (issue 17): each recorded with the real
agent, problem on and off; the advisor's finding on the problem side only, read from the trace
(never from the script's flags), and ``torchscope diff``'s change in the expected direction.

Each pair is recorded once per session for all xdist workers (tests/variants/conftest.py).
Assertions rest on call counts and allocated bytes (deterministic), not on time.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from app.analysis.advisor import advise
from tests.variants.conftest import VariantPair, run_evidence
from tests.variants.table import check_row

# A loaded machine (eight sessions on 2 cores) made one pair take over 3 minutes of wall time.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.usefixtures("module_trace_cache")]



def _advice_rules(run: Path, rule: str) -> tuple[list[str], tuple[str, ...]]:
    advice = advise(run_evidence(run), rules=[rule])
    assert not advice.errors, advice.errors
    return [f.rule for f in advice.findings], advice.checked


def _calls(diff: dict[str, Any], op: str) -> tuple[float, float]:
    """(baseline, candidate) calls of ``op`` per profiled step in ``diff --json``'s op table."""
    row = next((r for r in diff["ops"] if r["name"] == op), None)
    return (0.0, 0.0) if row is None else (float(row["baseline_calls"] or 0), float(row["candidate_calls"] or 0))


def _fires_on_problem_only(pair: VariantPair, rule: str) -> None:
    found, checked = _advice_rules(pair.problem, rule)
    assert found == [rule], f"{rule} did not fire on {pair.problem.name}"
    found, checked = _advice_rules(pair.fixed, rule)
    assert rule in checked and found == [], f"{rule} fired on the fixed side {pair.fixed.name}"


def test_zero_grad_variant(variant_pair) -> None:
    pair = variant_pair("zero_grad")
    check_row("zero_grad.py", pair)  # docs/variants.md's row
    _fires_on_problem_only(pair, "zero_grad_set_to_none")
    finding = advise(run_evidence(pair.problem), rules=["zero_grad_set_to_none"]).findings[0]
    assert finding.evidence["zeroing_calls_per_step"] == 18  # one aten::zero_ per parameter (9 Linear layers)
    diff = pair.diff
    assert "zero_grad_set_to_none" in {f["rule"] for f in diff["advice"]["resolved"]}
    before, after = _calls(diff, "aten::zero_")  # calls per profiled step
    assert before - after >= 18


def test_inplace_variant(variant_pair) -> None:
    pair = variant_pair("inplace")
    check_row("inplace.py", pair)  # docs/variants.md's row
    _fires_on_problem_only(pair, "inplace_activations")
    diff = pair.diff
    assert "inplace_activations" in {f["rule"] for f in diff["advice"]["resolved"]}
    assert _calls(diff, "aten::relu") == (4.0, 0.0)  # 4 ReLUs per profiled step
    assert _calls(diff, "aten::relu_")[1] == 4.0


def test_checkpointing_variant(variant_pair) -> None:
    pair = variant_pair("checkpointing")
    check_row("checkpointing.py", pair)  # docs/variants.md's row
    _fires_on_problem_only(pair, "activation_memory")
    # The recomputation in backward is not an evaluation with gradients (it fired here before).
    assert _advice_rules(pair.fixed, "eval_without_no_grad")[0] == []
    diff = pair.diff
    assert "activation_memory" in {f["rule"] for f in diff["advice"]["resolved"]}
    peak = diff["peak_memory"]
    assert peak["candidate_bytes"] < 0.6 * peak["baseline_bytes"], peak  # measured 14.7 → 3.3 MB
    before, after = _calls(diff, "aten::linear")
    assert after >= 1.5 * before  # each block's forward runs again in backward


def test_mixed_precision_variant(variant_pair) -> None:
    pair = variant_pair("mixed_precision")
    check_row("mixed_precision.py", pair)  # docs/variants.md's row
    problem, fixed = run_evidence(pair.problem), run_evidence(pair.fixed)
    cpu = next(d for d in problem.devices if d.get("type") == "cpu")
    assert isinstance(cpu.get("bf16_native"), bool)  # the agent recorded the CPU's bf16 support

    def on_cpu(ev: Any, native: bool) -> Any:
        devices = tuple({**d, "bf16_native": native, "bf16_flags": ["amx_bf16"] if native else []}
                        if d.get("type") == "cpu" else d for d in ev.devices)
        return dataclasses.replace(ev, devices=devices)

    def found(ev: Any) -> list[str]:
        advice = advise(ev, rules=["cpu_mixed_precision"])
        assert "cpu_mixed_precision" in advice.checked, advice.skipped
        return [f.rule for f in advice.findings]

    # A CPU with native bf16: fp32 matmuls are the finding, the autocast side is clean.
    assert found(on_cpu(problem, True)) == ["cpu_mixed_precision"]
    assert found(on_cpu(fixed, True)) == []
    # A CPU without it (where bf16 autocast was measured slower): never recommended.
    assert found(on_cpu(problem, False)) == []
    # A run recorded before the agent wrote the flags: not checked, never told to use bf16.
    old = dataclasses.replace(problem, devices=tuple({k: v for k, v in d.items() if not k.startswith("bf16")}
                                                     for d in problem.devices))
    assert "cpu_mixed_precision" in advise(old, rules=["cpu_mixed_precision"]).skipped
    # Whatever this machine is, the advice follows its recorded flags.
    assert found(problem) == (["cpu_mixed_precision"] if cpu["bf16_native"] else [])
    diff = pair.diff
    mm = next(r for r in diff["ops"] if r["name"] == "aten::mm")
    assert mm["baseline_calls"] == mm["candidate_calls"]  # same matmuls, in bf16 on the fixed side
    assert _calls(diff, "aten::_to_copy")[1] > _calls(diff, "aten::_to_copy")[0]  # autocast's casts


def test_cpu_bf16_flags_from_cpuinfo() -> None:
    from profiler_agent.environment import cpu_bf16

    assert cpu_bf16("processor : 0\nflags : fpu sse avx2 avx512f avx512_bf16 amx_tile amx_bf16\n") == {
        "bf16_native": True, "bf16_flags": ["amx_bf16", "avx512_bf16"]}
    assert cpu_bf16("processor : 0\nflags : fpu sse avx2\n") == {"bf16_native": False, "bf16_flags": []}
    assert cpu_bf16("processor : 0\nFeatures : fp asimd bf16 sve\n")["bf16_native"] is True  # Arm
    assert cpu_bf16("nothing here") == {}
