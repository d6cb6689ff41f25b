"""Helpers for AppTest-based page tests."""

from __future__ import annotations

import contextlib
import cProfile
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from streamlit.runtime.scriptrunner import script_runner
from streamlit.testing.v1 import AppTest

from profiler_agent.runformat import layout

APP = str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py")


def run_page_app(run: str, *, timeout: float = 120) -> AppTest:
    """The app on the Run page of ``run`` (the store is $TORCHSCOPE_RUNS), not run yet."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.query_params["run"] = run
    at.switch_page("app_pages/run.py")
    return at


def runs_page_app(*, timeout: float = 120) -> AppTest:
    """The app on its first page, the Runs page (the store is $TORCHSCOPE_RUNS), not run yet."""
    return AppTest.from_file(APP, default_timeout=timeout)


@contextlib.contextmanager
def profiled_script_runs(prof: cProfile.Profile | None) -> Iterator[None]:
    """Record the app script's runs (in AppTest's script thread) in ``prof`` while inside."""
    original = script_runner.ScriptRunner._run_script

    def profiled(self: Any, *args: Any, **kwargs: Any) -> Any:
        if prof is None:
            return original(self, *args, **kwargs)
        prof.enable()
        try:
            return original(self, *args, **kwargs)
        finally:
            prof.disable()

    script_runner.ScriptRunner._run_script = profiled  # type: ignore[method-assign]
    try:
        yield
    finally:
        script_runner.ScriptRunner._run_script = original  # type: ignore[method-assign]


def use_store(root: Path) -> None:
    """Point the app at the store ``root`` (for a process of its own, e.g. a benchmark)."""
    os.environ[layout.ROOT_ENV] = str(root)


def open_app(
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
    *,
    run: str | None = None,
    page: str | None = None,
    timeout: float = 120,
) -> AppTest:
    """Run the app on store ``root``; on the Run page when ``run`` is given (or on ``page``)."""
    monkeypatch.setenv(layout.ROOT_ENV, str(root))
    at = AppTest.from_file(APP, default_timeout=timeout)
    if run is not None:
        at.query_params["run"] = run
        page = page or "app_pages/run.py"
    if page:
        at.switch_page(page)
    return at.run()


def texts(elements) -> str:  # noqa: ANN001 - an AppTest ElementList
    return "\n".join(str(e.value) for e in elements)


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def show_tab(at: AppTest, title: str, *, key: str = "run_tab") -> Any:
    """The tab labelled ``title``, opened first: the Run and Compare pages build only the open tab
    (their ``st.tabs`` track state under ``key``: ``run_tab`` or ``compare_tab``), so another tab is
    opened by setting that key and running the script again, as a click in the browser does."""
    labels = [t.label for t in at.tabs]
    current = at.session_state[key] if key in at.session_state else (labels[0] if labels else None)
    if current != title:
        at.session_state[key] = title
        at.run()
    return next(t for t in at.tabs if t.label == title)


def vega_specs(block: Any) -> list[dict[str, Any]]:
    """The Vega-Lite specs of the charts in ``block`` (a tab or the app), as sent to the browser."""
    import json

    return [json.loads(c.proto.spec) for c in block.get("vega_lite_chart")]


def vega_rows(chart: Any) -> list[dict[str, Any]]:
    """The rows of a Vega-Lite chart's top-level data, which Streamlit sends apart from the spec
    as Arrow IPC bytes (``proto.data``); [] when the spec carries its data in its layers."""
    import pyarrow as pa

    raw = chart.proto.data.data
    return pa.ipc.open_stream(raw).read_all().to_pylist() if raw else []


def chart_labels(spec: dict[str, Any]) -> list[str]:
    """The texts a Vega-Lite spec writes on its chart (its text layers' labels, e.g. the medians')."""
    return [str(r.get("label", "")) for layer in spec.get("layer", []) if layer["mark"]["type"] == "text"
            for r in layer["data"]["values"]]
