"""How the suite is shared between two pytest-xdist workers (``make test``: ``-n 2``).

pyproject.toml's addopts choose ``--dist loadfile --no-loadscope-reorder`` (a serial run ignores
them), and ``order_for_workers`` sorts the collected files, on every worker alike as xdist requires:

- **One file, one worker** (``loadfile``): a file's module-scoped fixtures (real jobs recorded once
  for the file, a trace cache per module) are built once, never on both workers.
- **The longest first**: files are sent in the order of their expected seconds, longest first
  (``--no-loadscope-reorder`` keeps that order instead of xdist's count of tests): a long file that
  started last would leave the other core idle at the end. Expected seconds come from
  ``EXPECTED_S`` (measured, see below), else from the number of tests of the file. Within a file
  the order of its tests is kept.

(``--dist loadgroup`` with an ``xdist_group`` per file and one for the browser tests was the first
plan: pytest-xdist 3.8 renames grouped items through ``item._nodeid``, which pytest 9 no longer
reads, so its groups are silently ignored there.)

``EXPECTED_S`` is a hint, not a contract: a stale entry only makes the split less even. To refresh
it, run the suite with ``--durations=0`` and add up setup, call and teardown per file (``python -m
tests.schedule durations.txt`` prints the table).

Without xdist (a serial run, ``TEST_WORKERS=0``) nothing is changed. A session-scoped fixture is
still built once per worker that needs it: use tests/once.py for an expensive one.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

# Seconds per file (setup + call + teardown of its tests) on two workers of a 2-core machine, from
# CI's --durations listings; a shared session store (sample_store, ddp_store, tests/once.py) is
# counted once, in the first file expected to ask for it (test_every_tab_flow.py, test_distributed.py).
EXPECTED_S: dict[str, float] = {
    "tests/browser/test_every_tab_flow.py": 170,
    "tests/faults/test_agent_sigkill.py": 85,
    "tests/browser/test_flows.py": 80,
    "tests/browser/test_security.py": 70,
    "tests/stores/test_agent_remote.py": 65,
    "tests/agent/test_frameworks.py": 62,
    "tests/cli/test_ab.py": 56,
    "tests/agent/test_evaluation_steps.py": 55,
    "tests/agent/test_lifecycle.py": 50,
    "tests/agent/test_distributed.py": 45,
    "tests/browser/test_compare_flow.py": 40,
    "tests/browser/test_clean_numbers.py": 30,
    "tests/workspace/test_parallel_ingest.py": 25,
    "tests/agent/test_windows.py": 24,
    "tests/analysis/compare/test_comparison.py": 22,
    "tests/faults/test_agent_jobs.py": 20,
    "tests/agent/test_accumulation.py": 18,
    "tests/analysis/compare/test_memory_categories.py": 17,
    "tests/agent/test_wrapper.py": 12,
    "tests/agent/test_compile.py": 10,
    "tests/agent/test_api.py": 10,
    "tests/agent/test_tensorboard.py": 10,
}
# A file not listed: this many seconds per test, and at least a floor per file (AppTest pages and
# agent jobs are slow even one at a time, pure code fast); a test marked slow adds 3 s.
PER_TEST_S: tuple[tuple[str, float, float], ...] = (
    ("tests/app/", 2.0, 10.0), ("tests/agent/", 3.0, 10.0), ("tests/stores/", 2.0, 10.0),
    ("tests/variants/", 2.0, 10.0), ("tests/sweep/", 1.0, 5.0), ("tests/golden/", 2.0, 10.0),
    ("tests/faults/", 0.5, 0.0), ("tests/cli/", 0.5, 0.0), ("", 0.2, 0.0),
)


def group_of(item: pytest.Item) -> str:
    """The file of a test: xdist's unit of work under ``--dist loadfile``."""
    return item.nodeid.split("::", 1)[0]


def expected_seconds(group: str, n_tests: int, n_slow: int) -> float:
    if group in EXPECTED_S:
        return EXPECTED_S[group]
    per_test, floor = next((s, f) for prefix, s, f in PER_TEST_S if group.startswith(prefix))
    return max(floor, per_test * n_tests + 3.0 * n_slow)


def order_for_workers(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Sort the files longest first, keeping the order of each file's tests (in place)."""
    if not hasattr(config, "workerinput"):  # not an xdist worker: a serial run keeps its order
        return
    groups: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        groups[group_of(item)].append(item)
    cost = {g: expected_seconds(g, len(its), sum(1 for i in its if i.get_closest_marker("slow")))
            for g, its in groups.items()}
    first_seen = {g: n for n, g in enumerate(groups)}
    order = sorted(groups, key=lambda g: (-cost[g], first_seen[g]))
    items[:] = [item for g in order for item in groups[g]]


_LINE = re.compile(r"^\s*([\d.]+)s\s+(setup|call|teardown)\s+(\S+?)::")


def table_from_durations(text: str) -> dict[str, float]:
    """Seconds per group from a ``--durations=0`` listing."""
    per: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            per[m.group(3)] += float(m.group(1))
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    for group, seconds in table_from_durations(Path(sys.argv[1]).read_text()).items():
        if seconds >= 8:
            print(f'    "{group}": {seconds:.0f},')
