"""The suite's own bookkeeping: the summary table counts every class it saw."""
from __future__ import annotations

import pytest

from tests.faults import summary


@pytest.mark.fault("suite bookkeeping")
def test_the_summary_table_lists_each_class_with_its_counts() -> None:
    summary._OUTCOMES["example class"]["passed"] += 2
    summary._OUTCOMES["example class"]["failed"] += 1
    try:
        table = summary.summary_table()
        assert "| example class | 3 | 2 | 1 | 0 |" in table
    finally:
        del summary._OUTCOMES["example class"]
