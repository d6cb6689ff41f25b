"""tests/schedule.py: the split between two xdist workers keeps every test, once, in its file's order."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import schedule


class FakeItem:
    def __init__(self, nodeid: str, slow: bool = False) -> None:
        self.nodeid = nodeid
        self.marks = [pytest.mark.slow.mark] if slow else []

    def get_closest_marker(self, name: str):  # noqa: ANN201
        return next((m for m in self.marks if m.name == name), None)


def _config(worker: bool) -> SimpleNamespace:
    cfg = SimpleNamespace()
    if worker:
        cfg.workerinput = {}
    return cfg


def _items() -> list[FakeItem]:
    return [FakeItem("tests/data/test_a.py::t1"), FakeItem("tests/browser/test_flows.py::f1"),
            FakeItem("tests/data/test_a.py::t2"), FakeItem("tests/faults/test_agent_sigkill.py::k", slow=True),
            FakeItem("tests/agent/test_new.py::n1", slow=True), FakeItem("tests/browser/test_security.py::s1"),
            FakeItem("tests/browser/test_flows.py::f2")]


def test_longest_groups_first_every_test_once_in_file_order() -> None:
    items = _items()
    schedule.order_for_workers(_config(worker=True), items)  # type: ignore[arg-type]
    ids = [i.nodeid for i in items]
    assert sorted(ids) == sorted(i.nodeid for i in _items())
    assert ids == ["tests/faults/test_agent_sigkill.py::k", "tests/browser/test_flows.py::f1",
                   "tests/browser/test_flows.py::f2", "tests/browser/test_security.py::s1",
                   "tests/agent/test_new.py::n1", "tests/data/test_a.py::t1", "tests/data/test_a.py::t2"]


def test_a_serial_run_keeps_the_collection_order() -> None:
    items = _items()
    schedule.order_for_workers(_config(worker=False), items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [i.nodeid for i in _items()]


def test_table_from_a_durations_listing() -> None:
    text = ("12.50s call     tests/browser/test_flows.py::test_a\n"
            "3.00s setup    tests/browser/test_security.py::test_b\n"
            "2.25s call     tests/cli/test_ab.py::test_c[1]\n"
            "0.75s teardown tests/cli/test_ab.py::test_c[2]\n")
    assert schedule.table_from_durations(text) == {"tests/browser/test_flows.py": 12.5, "tests/cli/test_ab.py": 3.0,
                                                   "tests/browser/test_security.py": 3.0}
