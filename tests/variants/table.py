"""docs/variants.md's checked table, read and compared with a recorded pair (so the docs cannot drift).

The table (section "## The table, checked") has one row per pair of ``PAIRS``:

    | `zero_grad.py` | `zero_grad_set_to_none` | fires | silent | `aten::zero_` calls per step: fewer |

- **problem side / fixed side**: ``fires``, ``fires LOW`` (at that severity), ``silent`` (checked,
  no finding), ``fires where the CPU has native bf16`` (the recorded ``bf16_native`` decides), or
  ``under half the problem's share`` (the rule's measure, whether it fires or not);
- **the diff shows**: ``; ``-separated ``QUANTITY: DIRECTION`` items read from ``torchscope diff
  problem fixed --json``, problem → fixed. Directions: ``more``/``higher``, ``fewer``/``less``/
  ``lower``, ``halved``, ``same``, ``from none`` (0 → some). Quantities: ```OP` calls per step``,
  ``peak memory``, ``<category> time per step`` (breakdown), ```METRIC` (final)``, ```METRIC` (best)``,
  ``steps``, ``model FLOPs per rank``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.compare_helpers import overload
from tests.variants.conftest import PROJECT_ROOT, VariantPair, run_advice, run_evidence

DOC = PROJECT_ROOT / "docs" / "variants.md"
SECTION = "## The table, checked"
_ROW = re.compile(r"^\|\s*`(?P<file>[a-z_]+\.py)`\s*\|\s*`(?P<rule>[a-z0-9_]+)`\s*\|(?P<problem>[^|]*)\|"
                  r"(?P<fixed>[^|]*)\|(?P<diff>[^|]*)\|\s*$")


class Row(NamedTuple):
    script: str
    rule: str
    problem: str
    fixed: str
    diff: str


def rows(text: str | None = None) -> dict[str, Row]:
    """script name → its row of the checked table."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    assert SECTION in text, f"{DOC}: no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = [Row(m["file"], m["rule"], m["problem"].strip(), m["fixed"].strip(), m["diff"].strip())
             for line in section.splitlines() if (m := _ROW.match(line))]
    return {r.script: r for r in found}


def _side_matches(claim: str, run: Path, rule: str, problem_share: float | None) -> str | None:
    """None when the recorded side shows what the table claims, else what it shows."""
    advice = run_advice(run)
    found = {f.rule: f for f in advice.findings}
    state = (f"fires {found[rule].severity.upper()}" if rule in found
             else "silent" if rule in advice.checked else f"skipped ({advice.skipped.get(rule)})")
    if claim == "fires where the CPU has native bf16":
        cpu = next(d for d in run_evidence(run).devices if d.get("type") == "cpu")
        want_fire = cpu.get("bf16_native") is True
        return None if (rule in found) == want_fire else f"{state} (bf16_native={cpu.get('bf16_native')})"
    if claim == "under half the problem's share":
        share = advice.measures.get(rule)
        ok = problem_share is not None and share is not None and share < 0.5 * problem_share
        return None if ok else f"share {share} against the problem's {problem_share}"
    if claim == "fires":
        return None if rule in found else state
    if claim.startswith("fires "):
        return None if state == f"fires {claim.split()[1].upper()}" else state
    if claim == "silent":
        return None if state == "silent" else state
    return f"an unknown claim {claim!r}"


def _quantity(diff: dict[str, Any], name: str) -> tuple[float, float]:
    """(problem, fixed) of one quantity of the table, from ``diff --json``."""
    if m := re.fullmatch(r"`([^`]+)` calls per step", name):
        row = next((r for r in diff["ops"] if r["name"] == m[1]), None)
        return (0.0, 0.0) if row is None else (float(row["baseline_calls"] or 0), float(row["candidate_calls"] or 0))
    if name == "peak memory":
        return float(diff["peak_memory"]["baseline_bytes"]), float(diff["peak_memory"]["candidate_bytes"])
    if m := re.fullmatch(r"(\w+) time per step", name):
        [row] = [r for r in diff["breakdown_delta"] if r["category"] == m[1].lower()]
        return float(row["baseline_us"]), float(row["candidate_us"])
    if m := re.fullmatch(r"`(\w+)` \((final|best)\)", name):
        [row] = [r for r in diff["metrics"] if r["metric"] == m[1]]
        return float(row[f"baseline_{m[2]}"]), float(row[f"candidate_{m[2]}"])
    if name == "steps":
        return float(diff["baseline"]["steps"]), float(diff["candidate"]["steps"])
    if name == "model FLOPs per rank":
        [row] = [r for r in diff["module_diff"] if r["path"] == "(model)"]
        return float(row["baseline_flops"]), float(row["candidate_flops"])
    raise AssertionError(f"{DOC}: the table names an unknown quantity {name!r}")


def _direction_holds(direction: str, a: float, b: float) -> bool:
    if direction in ("more", "higher"):
        return b > a
    if direction in ("fewer", "less", "lower"):
        return b < a
    if direction == "halved":
        return abs(2 * b - a) <= 0.01 * abs(a)
    if direction == "same":
        return a == b
    if direction == "from none":
        return a == 0 < b
    raise AssertionError(f"{DOC}: the table names an unknown direction {direction!r}")


def check_row(script: str, pair: VariantPair) -> None:
    """Fail with every mismatch between the table's row for ``script`` and the recorded pair."""
    row = rows()[script]
    problems: list[str] = []
    timing_only: list[str] = []
    problem_share = run_advice(pair.problem).measures.get(row.rule)
    for side, claim, run in (("problem", row.problem, pair.problem), ("fixed", row.fixed, pair.fixed)):
        if (shown := _side_matches(claim, run, row.rule, problem_share)) is not None:
            problems.append(f"{side} side: the table says {claim!r}, the run shows {shown}")
            if busy := overload():  # a rule's share of the step, measured while other jobs took the CPUs
                timing_only.append(f"{side} side {claim!r}: {shown}, {busy}")
    diff = pair.diff
    for item in filter(None, (part.strip() for part in row.diff.split(";"))):
        quantity, _, direction = item.rpartition(":")
        a, b = _quantity(diff, quantity.strip())
        if not _direction_holds(direction.strip(), a, b):
            problems.append(f"the table says {item!r}; the diff shows {a:g} → {b:g}")
            if "_time_s" in quantity and (busy := overload()):  # a wall-clock metric of a starved job
                timing_only.append(f"{item}: {a:g} → {b:g}, {busy}")
    if problems and len(timing_only) == len(problems):
        pytest.skip(f"{DOC}, row {script}: " + "; ".join(timing_only))
    assert not problems, f"{DOC}, row {script}:\n" + "\n".join(problems)
