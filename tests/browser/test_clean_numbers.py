"""Issue 16 in a real browser: a CPU agent run's tabs show no raw agent key, no unformatted number
and no GPU column (DOM text and the charts' SVG text), with screenshots to look at."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_flows import _agent_run_or
from tests.browser.waits import CHART_TEXT, EXCEPTION, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RAW_KEYS = re.compile(r"\b(?:lr_\d+|data_time_s|step_time_s|cpu_time_s|[a-z_]+_bytes)\b")
# 7+ digits in a row: a byte count, FLOPs or µs printed raw (run ids' dates are taken out first)
RAW_NUMBER = re.compile(r"(?<![\d.,])\d{7,}(?![\d.,])")
DATES = re.compile(r"\b\d{8}-\d{6}\b|\b20\d\d-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?")
GPU_WORDS = ("Device self", "GPU kernel", "Memcpy", "Memset")
TABS = ("Overview", "Findings", "Metrics", "Operators", "Memory", "System")
# A unit left in a label as a key's suffix ("Param mib", "Idle median s") instead of on its value.
RAW_UNIT_WORD = re.compile(r"^[A-Z][a-z ]*\b(?:mib|gib|mb|s|ms|us)$", re.MULTILINE)



def _visible_text(page) -> str:  # noqa: ANN001
    panel = page.locator('[role="tabpanel"]:visible')
    text = panel.inner_text()
    # chart titles, axes and legends are SVG text: no innerText
    svg = panel.locator(CHART_TEXT).evaluate_all("els => els.map(e => e.textContent).join('\\n')")
    return f"{text}\n{svg}"


# Its setup may record the session's sample runs, or wait for the other xdist worker to record
# them (minutes on a loaded machine).
@pytest.mark.timeout(900)
def test_cpu_agent_run_shows_clean_numbers(page, server, browser_store):  # noqa: ANN001
    run = _agent_run_or(browser_store, "baseline")
    page.goto(f"{server}/run?run={run}")
    page.get_by_role("tab", name="Overview").wait_for()
    wait_idle(page, 400_000)
    problems = []
    for name in TABS:
        page.get_by_role("tab", name=name).click()
        wait_idle(page, 400_000)
        page.wait_for_timeout(500)
        assert page.locator(EXCEPTION).count() == 0, f"exception box on tab {name}"
        screenshot(page, f"clean_numbers_{name.lower()}")
        text = DATES.sub("", _visible_text(page).replace(run, ""))
        problems += [f"{name}: raw key {m!r}" for m in RAW_KEYS.findall(text)]
        problems += [f"{name}: unformatted number {m!r}" for m in RAW_NUMBER.findall(text)]
        problems += [f"{name}: GPU column/legend {w!r}" for w in GPU_WORDS if w in text]
        problems += [f"{name}: unit word in a label {m!r}" for m in RAW_UNIT_WORD.findall(text)]
    assert not problems, problems
