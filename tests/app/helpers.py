"""Helpers for AppTest-based page tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from profiler_agent.runformat import layout

APP = str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py")


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
