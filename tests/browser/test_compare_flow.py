"""The Compare page in a real headless Chromium: verdicts, every tab, the Markdown download."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser.conftest import screenshot
from tests.browser.waits import EXCEPTION, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]




def _pair(store) -> str:  # noqa: ANN001
    """Agent-recorded sample runs when the store has them, else the hand-made pair."""
    from profiler_agent import runformat as rf

    ids = {m.name: p.name for p, m in rf.list_runs(store).runs if "sample" in m.tags}
    if {"baseline", "optimized"} <= set(ids):
        return f"{ids['baseline']},{ids['optimized']}"
    return "baseline,optimized"


def test_compare_flow(page, server, browser_store) -> None:  # noqa: ANN001
    page.goto(f"{server}/compare?runs={_pair(browser_store)}")
    page.get_by_role("heading", name="Compare runs").wait_for()
    # The headline names the quantity it judged, whatever the verdict (faster, same, inconclusive ...).
    page.get_by_text(re.compile(r"(Step time|Time per sample|Time per token): optimized")).first.wait_for(
        timeout=180_000)
    wait_idle(page)
    assert page.locator(EXCEPTION).count() == 0
    # waited for, not counted: on a loaded machine the tiles can still be on their way after the headline
    for label in ("Step time (median, steady state)", "Judged by", "Replicates"):
        page.get_by_text(label).first.wait_for(timeout=60_000)
    # the first tab's charts (step times, waterfall) drawn, so the screenshot shows them
    page.wait_for_function("() => document.querySelectorAll("
                           "'.js-plotly-plot .main-svg, [data-testid=\"stVegaLiteChart\"] svg.marks').length >= 2",
                           timeout=60_000)
    screenshot(page, "compare_00_verdicts")
    tabs = page.get_by_role("tab")
    names = [tabs.nth(i).inner_text().strip() for i in range(tabs.count())]
    assert names[0] == "Where the time went" and names[-1] == "Export", names
    for i, name in enumerate(names):
        page.get_by_role("tab").nth(i).click()
        wait_idle(page)  # only the open tab is built: a click reruns the page for it
        assert page.locator(EXCEPTION).count() == 0, f"exception box on tab {name}"
        screenshot(page, f"compare_{i + 1:02d}_{name.lower().replace(' ', '_')}")
    with page.expect_download() as info:
        page.get_by_role("button", name="Download Markdown (PR comment)").click()
    text = Path(info.value.path()).read_text(encoding="utf-8")
    assert text.startswith("### Torchscope: optimized vs baseline") and "(headline)" in text
