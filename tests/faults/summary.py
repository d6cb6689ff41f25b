"""The fault suite's tally: outcomes of every test marked ``@pytest.mark.fault("class")``, wherever
it lives (tests/faults, and fault cases kept next to their code: browser, data, app tests).

tests/conftest.py installs these hooks for the whole session. At the end a summary table (fault
class, cases, outcomes) is printed in the terminal summary and written to
``test-output/faults_summary.md``, so a reader of CI's output sees at once which classes of
faults and bad input are covered and how they came out. docs/faults.md says what the product
promises under each class.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

_OUTCOMES: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
SUMMARY = Path(__file__).resolve().parents[2] / "test-output" / "faults_summary.md"


def fault_class(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("fault")
    return str(marker.args[0]) if marker and marker.args else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    outcome = yield
    cls = fault_class(item)
    if cls is not None:  # travels with the report, so an xdist controller sees it too
        outcome.get_result().user_properties.append(("fault class", cls))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count a case once: where the tests run serially, and on xdist's controller (which replays
    each worker's reports; the workers' own counts are never printed)."""
    cls = next((v for k, v in report.user_properties if k == "fault class"), None)
    if cls is None:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _OUTCOMES[str(cls)][report.outcome] += 1


def summary_table() -> str:
    rows = ["| fault class | cases | passed | failed | skipped |", "| --- | --- | --- | --- | --- |"]
    for cls in sorted(_OUTCOMES):
        c = _OUTCOMES[cls]
        total = sum(c.values())
        rows.append(f"| {cls} | {total} | {c.get('passed', 0)} | {c.get('failed', 0)} | {c.get('skipped', 0)} |")
    return "\n".join(rows)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _OUTCOMES:
        return
    table = summary_table()
    terminalreporter.write_sep("=", "fault and hostile-input suite")
    terminalreporter.write_line(table)
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text("# Fault and hostile-input suite\n\n" + table + "\n", encoding="utf-8")
