"""Main flows in a real headless Chromium: Runs catalog → a run, with screenshots (every tab of
every kind of run: test_every_tab_flow.py)."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import screenshot
from tests.browser.waits import CHART, EXCEPTION, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_runs_catalog(page, server):  # noqa: ANN001
    page.goto(f"{server}/")
    page.get_by_role("heading", name="Runs").wait_for()
    page.locator('[data-testid="stDataFrame"]').first.wait_for()
    wait_idle(page)
    assert page.locator(EXCEPTION).count() == 0
    assert page.get_by_text(re.compile(r"\d+ of \d+ runs")).count() == 1
    screenshot(page, "runs_catalog")
    page.get_by_label("Filter").fill("adam")
    page.get_by_label("Filter").press("Enter")
    page.get_by_text(re.compile(r"^1 of \d+ runs")).wait_for()
    assert page.locator(EXCEPTION).count() == 0
    screenshot(page, "runs_catalog_filtered")


def _agent_run_or(store, name: str) -> str:  # noqa: ANN001
    """The id of the agent-recorded sample run called ``name`` when there is one, else ``name``."""
    from profiler_agent import runformat as rf

    for path, m in rf.list_runs(store).runs:
        if m.name == name and "sample" in m.tags:
            return path.name
    return name


def test_imported_gpu_two_rank_run(page, server):  # noqa: ANN001
    page.goto(f"{server}/run?run=two-ranks")
    page.get_by_role("tab", name="Overview").wait_for()
    wait_idle(page)
    assert page.locator(EXCEPTION).count() == 0
    page.get_by_role("tab", name="Operators").click()
    wait_idle(page)
    panel = page.locator('[role="tabpanel"]:visible')
    panel.locator(CHART).first.wait_for()
    assert page.locator(EXCEPTION).count() == 0
    screenshot(page, "run_two_ranks_operators")
    page.get_by_role("tab", name="Kernels").click()
    wait_idle(page)
    kernels = page.locator('[role="tabpanel"]:visible')
    kernels.locator("[data-testid='stVegaLiteChart'] :is(svg, canvas).marks").nth(1).wait_for()  # busy, share
    assert kernels.locator(".js-plotly-plot").count() == 0  # Vega-Lite since wave 11: no plotly.js
    screenshot(page, "run_two_ranks_kernels")


def test_open_run_from_catalog(page, server):  # noqa: ANN001
    page.goto(f"{server}/")
    grid = page.locator('[data-testid="stDataFrame"]').first
    grid.wait_for()
    wait_idle(page)
    # The first column of the grid holds the row-selection checkboxes.
    box = grid.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 18, box["y"] + 55)
    page.get_by_role("button", name="Open run").wait_for()
    wait_idle(page)
    page.get_by_role("button", name="Open run").click()
    page.get_by_role("tab", name="Overview").wait_for()
    page.locator('[data-testid="stMetricValue"]').first.wait_for()  # the headline numbers, not skeletons
    wait_idle(page)
    assert "/run" in page.url and "run=" in page.url
    assert page.locator(EXCEPTION).count() == 0
    screenshot(page, "run_opened_from_catalog")
