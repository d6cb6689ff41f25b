"""Waiting for the Streamlit app in a real browser: one definition for every browser test."""
from __future__ import annotations

from typing import Any

EXCEPTION = '[data-testid="stException"]'  # Streamlit's exception box
READY = "[data-testid='stApp'][data-test-script-state='notRunning']"  # the script has finished


def wait_idle(page: Any, timeout_ms: int = 180_000) -> None:
    """Until the page's script run is over: a click's rerun request first reaches the server, then
    Streamlit's status widget ("Running…") goes and the app says its script is not running (the
    widget may not show at all on a loaded machine, so both are waited for)."""
    page.wait_for_timeout(250)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout_ms)
    page.wait_for_selector(READY, timeout=timeout_ms)

# A drawn chart: a plotly figure, or a Vega-Lite chart once its marks are in the page (every Run page
# tab's charts are Vega-Lite; Compare's other tabs and the HTML report are plotly).
# (Vega draws large data, e.g. the Memory tab's timeline, on a canvas instead of SVG.)
CHART = ":is(.js-plotly-plot, [data-testid='stVegaLiteChart'] :is(svg, canvas).marks)"
# The SVG text of every chart (titles, axes, legends): no innerText.
CHART_TEXT = ".js-plotly-plot text, [data-testid='stVegaLiteChart'] svg.marks text"
