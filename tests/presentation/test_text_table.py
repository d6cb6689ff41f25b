"""Tests of app.presentation.text_table: the three layouts the CLI prints."""
from __future__ import annotations

from app.presentation.text_table import text_table


def test_rule_under_header_cells_left() -> None:  # torchscope diff
    assert text_table(["op", "delta"], [["aten::mm", "+1.0 ms"], ["x", "-2 µs"]]).splitlines() == [
        "op        delta  ",
        "--------  -------",
        "aten::mm  +1.0 ms",
        "x         -2 µs  ",
    ]


def test_numbers_right() -> None:  # torchscope analyze
    assert text_table(["RANK", "DURATION"], [["0", "1.50 ms"], ["12", "900.0 µs"]], numbers_right=True) == (
        "RANK  DURATION\n----  --------\n0      1.50 ms\n12    900.0 µs")


def test_no_rule_stripped() -> None:  # torchscope ls
    assert text_table(["ID", "NAME", "NOTE"], [["a1", "baseline", ""], ["b22", "x", "n"]],
                      rule=False, strip=True) == "ID   NAME      NOTE\na1   baseline\nb22  x         n"


def test_header_only() -> None:
    assert text_table(["quantity", "verdict"], []) == "quantity  verdict\n--------  -------"
