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

from app.ui.layout import render_sidebar, set_session_defaults  # noqa: E402

_PAGES_DIR = Path(__file__).resolve().parent / "app_pages"


def main() -> None:
    st.set_page_config(page_title="Torchscope", page_icon="🔭", layout="wide")
    set_session_defaults()
    pages = [
        st.Page(
            _PAGES_DIR / "runs.py", title="Runs", icon=":material/table_rows:", url_path="runs", default=True
        ),
        st.Page(_PAGES_DIR / "run.py", title="Run", icon=":material/monitoring:", url_path="run"),
    ]
    if (_PAGES_DIR / "compare.py").is_file():  # built by its own module; the app works without it
        pages.append(
            st.Page(
                _PAGES_DIR / "compare.py",
                title="Compare",
                icon=":material/compare_arrows:",
                url_path="compare",
            )
        )
    page = st.navigation(pages)
    render_sidebar()
    page.run()


main()
