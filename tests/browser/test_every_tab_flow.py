"""Every tab of an agent run, an imported GPU trace and a multi-rank trace in a real headless
Chromium, one tab built per click, with screenshots under test-output/screenshots (issue 16)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_flows import _agent_run_or
from tests.browser.waits import EXCEPTION, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _every_tab(page, prefix: str) -> list[str]:  # noqa: ANN001
    tabs = page.get_by_role("tab")
    names = [tabs.nth(i).inner_text().strip() for i in range(tabs.count())]
    assert names[:1] == ["Overview"] and "Timeline" in names and "Config" in names, names
    for i, name in enumerate(names):
        panel = page.locator('[role="tabpanel"]:visible')
        if i:
            page.get_by_role("tab", name=name, exact=True).click()
            # the panel of a tab not open before is empty until the page's rerun has built it
            panel.locator('[data-testid="stElementContainer"]').first.wait_for()
            wait_idle(page)
        # only the open tab is built: every other panel is empty
        assert page.locator('[role="tabpanel"]:not(:visible) [data-testid="stMarkdown"]').count() == 0, name
        assert panel.locator('[data-testid="stElementContainer"]').count() > 0, f"tab {name} is empty"
        assert page.locator(EXCEPTION).count() == 0, f"exception box on tab {name}"
        charts = panel.locator("[data-testid='stVegaLiteChart']")
        for j in range(charts.count()):  # every chart drawn before the screenshot (the ranks' Overview was blank)
            charts.nth(j).locator(".marks").first.wait_for(state="attached")
        if name == "Timeline":
            _check_timeline(page, panel, prefix)
        if name == "Memory" and prefix == "agent":
            _check_memory(page, panel)
        if name == "Graph" and prefix == "agent":
            _check_graph(page, panel)
        screenshot(page, f"every_tab_{prefix}_{i:02d}_{name.lower().replace(' ', '_')}")
    return names


def _check_memory(page, panel) -> None:  # noqa: ANN001
    """The allocation timeline: Vega-Lite on a canvas (no plotly.js), a tooltip with the nearest
    event's totals under the pointer, and the zoom under it (a popover with the range slider)."""
    marks = panel.locator("[data-testid='stVegaLiteChart'] canvas.marks").first
    marks.wait_for()  # drawn
    assert panel.locator(".js-plotly-plot").count() == 0
    box = marks.bounding_box()
    assert box is not None
    tooltip = page.locator("#vg-tooltip-element")
    for at in (0.5, 0.3, 0.7):  # over the plot, not the legend; the nearest of the hover points
        page.mouse.move(box["x"] + box["width"] * at, box["y"] + box["height"] * 0.6)
        page.wait_for_timeout(300)
        if tooltip.count() and tooltip.is_visible():
            break
    assert "allocated (" in tooltip.inner_text() and "ms since trace start" in tooltip.inner_text()
    page.mouse.move(0, 0)
    zoom = panel.get_by_role("button", name="Zoom: whole range").first  # its slider opens on a click
    zoom.click()
    page.get_by_text("The range drawn (ms)").first.wait_for()
    page.keyboard.press("Escape")


def _check_graph(page, panel) -> None:  # noqa: ANN001
    """The backward graph is drawn as an image (a data URI: nothing in the SVG runs), the wheel zooms
    it, a double-click resets it, and the module icicle has its cells; Vega-Lite, no plotly.js."""
    charts = panel.locator("[data-testid='stVegaLiteChart']")
    image = charts.nth(0).locator("svg.marks image")
    image.wait_for()
    assert (image.get_attribute("href") or "").startswith("data:image/svg+xml;base64,")
    charts.nth(1).locator("svg.marks g.mark-rect path").nth(2).wait_for()  # the model and two modules at least
    assert panel.locator(".js-plotly-plot").count() == 0
    drawn = image.evaluate("e => e.getBBox().width")
    box = charts.nth(0).bounding_box()
    assert box is not None and drawn > 0
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 3)
    for _ in range(3):
        page.mouse.wheel(0, -200)
        page.wait_for_timeout(100)
    page.wait_for_timeout(500)
    zoomed = image.evaluate("e => e.getBBox().width")
    assert zoomed > 1.5 * drawn, (drawn, zoomed)  # the picture grew under the pointer
    page.mouse.dblclick(box["x"] + box["width"] / 2, box["y"] + box["height"] / 3)
    page.wait_for_timeout(500)
    assert image.evaluate("e => e.getBBox().width") == pytest.approx(drawn, rel=0.01)


def _check_timeline(page, panel, prefix: str) -> None:  # noqa: ANN001
    plot = panel.locator("[data-testid='stVegaLiteChart'] svg.marks").first  # Vega-Lite since issue 16's wave 10
    plot.wait_for()
    ticks = [t.strip() for t in plot.locator("g.role-axis[aria-label^='Y-axis'] g.role-axis-label text")
             .evaluate_all("els => els.map(e => e.textContent)")]
    assert ticks and not [t for t in ticks if re.search(r"tid -\d", t)], ticks  # never a bare negative id
    if prefix != "agent":
        assert any(t.startswith(("GPU ", "rank ")) or "GPU" in t for t in ticks), ticks
        # names are written on the slices wide enough for them
        labels = plot.locator("g.mark-text.role-mark text").evaluate_all("els => els.map(e => e.textContent.length)")
        assert labels and labels[0] > 0, "no slice is labelled"
        with page.expect_download() as info:
            panel.get_by_role("button", name="Download this range (Chrome trace JSON)").click()
        doc = json.loads(Path(info.value.path()).read_text(encoding="utf-8"))
        phases = {e.get("ph") for e in doc["traceEvents"]}
        assert "M" in phases and "X" in phases, phases  # metadata kept, the range's events in


# The first of these may also record the session's sample runs (minutes on a loaded machine).
@pytest.mark.timeout(900)
@pytest.mark.parametrize("prefix", ["agent", "gpu", "ranks"])
def test_every_tab(page, server, browser_store, prefix: str) -> None:  # noqa: ANN001
    """One flow per kind of run (each within the per-test timeout on a loaded machine)."""
    run = {"agent": _agent_run_or(browser_store, "baseline"), "gpu": "gpu-control", "ranks": "two-ranks"}[prefix]
    page.goto(f"{server}/run?run={run}")
    page.get_by_role("tab", name="Overview").wait_for()
    wait_idle(page)
    names = _every_tab(page, prefix)
    assert len(names) >= 10
    if prefix == "agent":
        page.get_by_role("tab", name="System").click()
        wait_idle(page)
        # Vega-Lite since issue 16's wave 10: the tab needs no plotly.js
        charts = page.locator('[role="tabpanel"]:visible [data-testid="stVegaLiteChart"] svg.marks')
        charts.first.wait_for()
        assert charts.count() >= 2
        assert page.locator('[role="tabpanel"]:visible .js-plotly-plot').count() == 0
    if prefix == "ranks":  # a deep link opens the tab it names
        page.goto(f"{server}/run?run={run}&run_tab=Timeline")
        page.locator('[role="tabpanel"]:visible [data-testid="stVegaLiteChart"] svg.marks').first.wait_for()
        wait_idle(page)
        assert page.get_by_role("tab", name="Timeline").get_attribute("aria-selected") == "true"
