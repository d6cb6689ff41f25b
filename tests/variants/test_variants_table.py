"""docs/variants.md's checked table names every recorded pair, a registered rule and claims the
checker knows; each pair's own test compares its row with the recording (``table.check_row``)."""
from __future__ import annotations

import re

from app.analysis.advisor import registered_rules
from tests.variants.conftest import PAIRS, PROJECT_ROOT
from tests.variants.table import _direction_holds, _quantity, rows

_CLAIMS = re.compile(r"^(fires|fires (LOW|MEDIUM|HIGH)|silent|fires where the CPU has native bf16|"
                     r"under half the problem's share)$")
_QUANTITY = re.compile(r"^(`[^`]+` calls per step|peak memory|\w+ time per step|`\w+` \((final|best)\)|steps|"
                       r"model FLOPs per rank): (more|higher|fewer|less|lower|halved|same|from none)$")


def test_docs_table_has_a_row_per_pair_with_known_claims() -> None:
    table = rows()
    assert sorted(table) == sorted(spec.script for spec in PAIRS.values())
    registered = {r.id for r in registered_rules()}
    for script, row in table.items():
        assert (PROJECT_ROOT / "sample_models" / "variants" / script).is_file(), script
        assert row.rule in registered, f"{script}: {row.rule} is not a registered rule"
        assert _CLAIMS.match(row.problem) and _CLAIMS.match(row.fixed), (script, row.problem, row.fixed)
        items = [part.strip() for part in row.diff.split(";") if part.strip()]
        assert items and all(_QUANTITY.match(item) for item in items), (script, row.diff)


def test_a_drifted_direction_is_caught() -> None:
    """The checker reads a row as written: an edited direction no longer holds for the same diff."""
    text = ("## The table, checked\n\n| variant | finding | problem side | fixed side | the diff shows |\n"
            "| --- | --- | --- | --- | --- |\n"
            "| `zero_grad.py` | `zero_grad_set_to_none` | fires | silent | `aten::zero_` calls per step: more |\n")
    [item] = rows(text)["zero_grad.py"].diff.split(";")
    quantity, _, direction = item.rpartition(":")
    diff = {"ops": [{"name": "aten::zero_", "baseline_calls": 19, "candidate_calls": 1}]}
    a, b = _quantity(diff, quantity.strip())
    assert (a, b) == (19, 1)
    assert not _direction_holds(direction.strip(), a, b) and _direction_holds("fewer", a, b)
