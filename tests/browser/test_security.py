"""Hostile input in a real headless Chromium: script payloads in every user-controlled field are
shown as text (none runs), and URL parameters that try to leave the store get the message."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from profiler_agent import runformat as rf
from tests.browser.conftest import screenshot
from tests.browser.hostile import HOSTILE_NAME, PAYLOAD
from tests.browser.waits import CHART, EXCEPTION, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# What a payload that ran, or a tag that the page parsed as HTML, would leave in the DOM.
INJECTED = """() => ({
  pwned: window.__pwned === undefined ? null : String(window.__pwned),
  imgs: document.querySelectorAll('img[src="x"], img[src="y"]').length,
  svgs: document.querySelectorAll('svg[onload]').length,
  scripts: Array.from(document.scripts).filter(s => s.textContent.includes('__pwned')).length,
  jslinks: Array.from(document.querySelectorAll('a[href]')).filter(a => /^\\s*javascript:/i.test(a.getAttribute('href'))).length,
})"""
CLEAN = {"pwned": None, "imgs": 0, "svgs": 0, "scripts": 0, "jslinks": 0}



def _hostile_id(store: Path) -> str:
    return next(p.name for p, m in rf.list_runs(store).runs if m.name == HOSTILE_NAME)


@pytest.mark.fault("XSS payload")
def test_payloads_are_shown_as_text_everywhere(page, server, browser_store):  # noqa: ANN001
    run = _hostile_id(browser_store)
    page.goto(f"{server}/run?run={urllib.parse.quote(run)}")
    page.get_by_role("tab", name="Overview").wait_for()
    wait_idle(page)
    assert PAYLOAD in page.get_by_role("heading").first.inner_text()  # the name, literally
    tabs = page.get_by_role("tab")
    names = [tabs.nth(i).inner_text().strip() for i in range(tabs.count())]
    for i, name in enumerate(names):
        page.get_by_role("tab").nth(i).click()
        # only the open tab is built: its panel is empty until the rerun has drawn it
        page.locator('[role="tabpanel"]:visible [data-testid="stElementContainer"]').first.wait_for()
        wait_idle(page)
        assert page.evaluate(INJECTED) == CLEAN, f"tab {name}"
        assert page.locator(EXCEPTION).count() == 0, f"exception box on tab {name}"
        if name == "Graph":  # the SVG's script and handlers never run: it is drawn as an image only
            panel = page.locator('[role="tabpanel"]:visible')
            image = panel.locator("[data-testid='stVegaLiteChart'] svg.marks image").first
            image.wait_for()
            assert (image.get_attribute("href") or "").startswith("data:image/svg+xml;base64,")
            assert panel.get_by_text("HostileBackward0").count() == 0  # its text is not in the page's DOM
            panel.locator("[data-testid='stVegaLiteChart'] svg.marks g.mark-rect path").nth(1).wait_for()  # icicle
            page.wait_for_timeout(500)  # an image's onload would have fired by now
            assert page.evaluate(INJECTED) == CLEAN
            screenshot(page, "xss_run_graph")
        if name == "Logs":
            panel = page.locator('[role="tabpanel"]:visible')
            # the log, as text (its code block may be drawn a moment after the panel's first element)
            panel.get_by_text("<script>window.__pwned=2</script>").first.wait_for(timeout=60_000)
            assert "<script>window.__pwned=2</script>" in panel.inner_text()
            screenshot(page, "xss_run_logs")
        if name == "Operators":
            plot = page.locator(f'[role="tabpanel"]:visible {CHART}').first
            plot.wait_for()
            # the op axis's labels: plotly's ticks or Vega-Lite's axis labels
            ticks = plot.locator(".ytick text, .role-axis-label text").evaluate_all("els => els.map(e => e.textContent)")
            assert any("::op" in t for t in ticks), ticks  # the payload op is drawn (as text)
            # and its tooltip shows the name as text: hover every bar until the payload's tooltip shows
            bars = plot.locator(".mark-rect path, .bars .point path")
            shown = []
            for i in range(bars.count()):
                bars.nth(i).hover(force=True)
                tip = page.locator("#vg-tooltip-element, .hoverlayer")
                shown += [t for t in tip.all_inner_texts() if "::op" in t]
                if shown:
                    break
            assert shown, "no tooltip named the payload op"
            assert page.evaluate(INJECTED) == CLEAN
            screenshot(page, "xss_run_operators")
    page.goto(f"{server}/")
    page.locator('[data-testid="stDataFrame"]').first.wait_for()
    wait_idle(page)
    assert page.evaluate(INJECTED) == CLEAN, "Runs page"
    base = next(p.name for p, m in rf.list_runs(browser_store).runs if m.name == "baseline" and "sample" not in m.tags)
    page.goto(f"{server}/compare?runs={urllib.parse.quote(base)},{urllib.parse.quote(run)}")
    page.get_by_text("Baseline").first.wait_for()
    wait_idle(page)
    assert page.evaluate(INJECTED) == CLEAN, "Compare page"
    assert page.locator(EXCEPTION).count() == 0
    screenshot(page, "xss_compare")


@pytest.mark.fault("URL leaves the store")
def test_urls_leaving_the_store_get_the_message(page, server, browser_store, planted_run):  # noqa: ANN001
    planted, secret = planted_run
    relative = os.path.relpath(planted, browser_store)
    assert relative.startswith("..")
    for ref in (str(planted), relative):
        page.goto(f"{server}/run?run={urllib.parse.quote(ref, safe='')}")
        page.get_by_text("outside the run store").first.wait_for()
        wait_idle(page)
        assert secret not in page.content()
        assert page.locator(EXCEPTION).count() == 0
        page.get_by_role("tab", name="Logs").click()  # the newest run of the store is shown instead
        wait_idle(page)
        assert secret not in page.content()
    screenshot(page, "url_outside_store_run")
    base = next(p.name for p, m in rf.list_runs(browser_store).runs if m.name == "baseline")
    page.goto(f"{server}/compare?runs={urllib.parse.quote(base)},{urllib.parse.quote(str(planted), safe='')}")
    page.get_by_text("outside the run store").first.wait_for()
    wait_idle(page)
    assert secret not in page.content()
    assert page.locator(EXCEPTION).count() == 0
    screenshot(page, "url_outside_store_compare")
