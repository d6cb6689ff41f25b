"""Torchscope's Streamlit entry point: page config, global session defaults, navigation (UI layer).

Run it with ``torchscope ui`` (or ``streamlit run app/streamlit_app.py``); the run store comes
from ``$TORCHSCOPE_RUNS`` (``torchscope ui --root`` sets it), else ``./runs``, and can be changed
in the sidebar.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run app/streamlit_app.py` puts app/ on sys.path, not the project root.
_PROJECT_ROOT = Path(__file__).resolve().parents[1]
if str(_PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(_PROJECT_ROOT))

import streamlit as st  # noqa: E402

from app.ui.layout import PAGES, render_sidebar, set_session_defaults  # noqa: E402
from app.ui.warmup import script_run  # noqa: E402


def main() -> None:
    with script_run():  # the Run page's warm-up waits while a script runs (app.ui.warmup)
        _run()


def _run() -> None:
    st.set_page_config(page_title="Torchscope", page_icon="🔭", layout="wide")
    set_session_defaults()
    pages = [st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url_path, default=p.default) for p in PAGES]
    page = st.navigation(pages)
    render_sidebar()
    page.run()


main()
