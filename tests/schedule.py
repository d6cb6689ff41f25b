"""How the suite is shared between two pytest-xdist workers (``make test``: ``-n 2 --dist loadgroup``).

Two rules, applied to the collected items on every worker (the same on each, as xdist requires;
pyproject.toml's addopts choose ``--dist loadgroup --no-loadscope-reorder``, which a serial run ignores):

- **One file, one worker.** Every test file is one xdist group, so its module-scoped fixtures
  (real jobs recorded once for the file, a trace cache per module) are built once, as with
  ``--dist loadfile``; the browser tests are one group together, so one streamlit server, one
  browser store and one Chromium serve them all.
- **The longest first.** Groups are sent in the order of their expected seconds, longest first
  (``--no-loadscope-reorder`` keeps that order): a long file that started last would leave the
  other core idle at the end. Expected seconds come from ``EXPECTED_S`` (measured, see below),
  else from the number of tests of the file. Within a file the order of its tests is kept.

``EXPECTED_S`` is a hint, not a contract: a stale entry only makes the split less even. To refresh
it, run the suite with ``--durations=0`` and add up setup, call and teardown per file (``python -m
tests.schedule durations.txt`` prints the table).

Without xdist (a serial run, ``TEST_WORKERS=0``) nothing is changed.

A file's module-scoped fixture is now set up on one worker only; a session-scoped one still once
per worker that needs it (use tests/once.py for an expensive one).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

BROWSER_GROUP = "tests/browser"

# Seconds per file (setup + call + teardown of its tests) on two workers of a 2-core machine, from
# CI's --durations listings; a shared session store (sample_store, ddp_store, tests/once.py) is
# counted once, in the first file expected to ask for it (the browser tests, tests/agent/test_distributed.py).
EXPECTED_S: dict[str, float] = {
    BROWSER_GROUP: 360,
    "tests/faults/test_agent_sigkill.py": 85,
    "tests/stores/test_agent_remote.py": 65,
    "tests/agent/test_frameworks.py": 62,
    "tests/cli/test_ab.py": 56,
    "tests/agent/test_evaluation_steps.py": 55,
    "tests/agent/test_lifecycle.py": 50,
    "tests/agent/test_distributed.py": 45,
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
    path = item.nodeid.split("::", 1)[0]
    return BROWSER_GROUP if path.startswith(BROWSER_GROUP + "/") else path


def expected_seconds(group: str, n_tests: int, n_slow: int) -> float:
    if group in EXPECTED_S:
        return EXPECTED_S[group]
    per_test, floor = next((s, f) for prefix, s, f in PER_TEST_S if group.startswith(prefix))
    return max(floor, per_test * n_tests + 3.0 * n_slow)


def order_for_workers(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each item with its file's xdist group and sort the files longest first (in place)."""
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
    if getattr(config.option, "loadgroup", False):  # set on the workers by xdist under --dist loadgroup
        for item in items:
            if item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(group_of(item)))


_LINE = re.compile(r"^\s*([\d.]+)s\s+(setup|call|teardown)\s+(\S+?)::")


def table_from_durations(text: str) -> dict[str, float]:
    """Seconds per group from a ``--durations=0`` listing."""
    per: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            path = m.group(3)
            per[BROWSER_GROUP if path.startswith(BROWSER_GROUP + "/") else path] += float(m.group(1))
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    for group, seconds in table_from_durations(Path(sys.argv[1]).read_text()).items():
        if seconds >= 8:
            print(f'    "{group}": {seconds:.0f},')
