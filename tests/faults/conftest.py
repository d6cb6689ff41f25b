"""The fault and hostile-input suite: every test here is marked ``@pytest.mark.fault("class")``
(the tally and its summary table are in tests/faults/summary.py, installed by tests/conftest.py
for the whole session, so fault cases elsewhere count too)."""
from __future__ import annotations

import pytest

from tests.faults.summary import fault_class


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults/" in item.nodeid.replace("\\", "/") and fault_class(item) is None:
            raise pytest.UsageError(f"{item.nodeid}: tests in tests/faults need @pytest.mark.fault('class')")
