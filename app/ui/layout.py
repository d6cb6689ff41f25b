"""App-wide Streamlit pieces: session defaults, the sidebar store picker, page links (UI layer)."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from app.workspace import stores
from profiler_agent.runformat import TorchscopeError, layout
from profiler_agent.runformat.store_url import is_store_url

__all__ = [
    "COMPARE_PAGE",
    "PAGES",
    "RUNS_PAGE",
    "RUN_PAGE",
    "PageSpec",
    "md_escape",
    "md_message",
    "record_hint",
    "render_sidebar",
    "set_session_defaults",
    "store_locked",
    "store_root",
]

_PAGES = Path(__file__).resolve().parents[1] / "app_pages"
RUNS_PAGE = str(_PAGES / "runs.py")
RUN_PAGE = str(_PAGES / "run.py")
COMPARE_PAGE = str(_PAGES / "compare.py")


@dataclass(frozen=True)
class PageSpec:
    """One page of the app's navigation: its script under app_pages/ and how the menu shows it."""

    path: str
    title: str
    icon: str
    url_path: str
    default: bool = False


# Every page, in menu order. streamlit_app.py builds the navigation from it; a test checks that each
# script exists and that its imports resolve, so a renamed page fails there, not in front of a user.
PAGES: tuple[PageSpec, ...] = (
    PageSpec(RUNS_PAGE, "Runs", ":material/table_rows:", "runs", default=True),
    PageSpec(RUN_PAGE, "Run", ":material/monitoring:", "run"),
    PageSpec(COMPARE_PAGE, "Compare", ":material/compare_arrows:", "compare"),
)


def set_session_defaults() -> None:
    """Global session_state defaults (pages use their own prefixed keys: runs_*, run_*, ...)."""
    st.session_state.setdefault("root", _configured_text())
    st.session_state.setdefault("refresh_s", 5)


def _configured_text() -> str:
    value = os.environ.get(layout.ROOT_ENV) or ""
    return value if is_store_url(value) else str(layout.resolve_root(value or None))


def _configured_root() -> Path:
    return _local_root(os.environ.get(layout.ROOT_ENV) or None)


# A store URL is listed again at most this often (the Runs page's auto-refresh reruns every few seconds).
_MIRROR_MAX_AGE_S = 5.0


def _local_root(value: str | None) -> Path:
    """The folder to read the store ``value`` from: a URL's local mirror (app.workspace.stores), with
    what mirroring skipped shown in the sidebar; a store that cannot be read stops the page with its error."""
    if not value or not is_store_url(value):
        return layout.resolve_root(value or None)
    try:
        mirror = stores.local_store(value, max_age_s=_MIRROR_MAX_AGE_S)
    except TorchscopeError as e:
        st.error(str(e))
        st.stop()
    for w in mirror.warnings[:5]:
        st.sidebar.warning(w, icon=":material/warning:")
    return mirror.root


def store_locked() -> bool:
    """True when the server is bound to an address other machines can reach (``torchscope ui
    --host 0.0.0.0``): the store is then the one it was started on, and a visitor cannot point
    the app at another folder of this machine."""
    address = str(st.get_option("server.address") or "").strip().strip("[]")
    if not address:  # a bare `streamlit run` (development): Streamlit's own default
        return False
    if address.lower() == "localhost":
        return False
    try:
        return not ipaddress.ip_address(address).is_loopback
    except ValueError:
        return True


def store_root() -> Path:
    """The run store the user is browsing (the configured one when the store is locked)."""
    if store_locked():
        return _configured_root()
    return _local_root(st.session_state.get("root") or None)


def record_hint(root: Path) -> str:
    """Markdown telling how to put runs into ``root``."""
    return (
        f"Record a run with `torchscope run --root {root} --name baseline -- python train.py`, "
        f"import a trace or a tb-profiler log folder with `torchscope import PATH --root {root}`, "
        f"or record the sample runs with `python -m sample_models.record --root {root}`."
    )


def render_sidebar() -> None:
    """The run store picker, shown on every page."""
    with st.sidebar:
        if store_locked():
            st.text_input("Run store", value=_configured_text(), disabled=True, key="root_locked",
                          help="The server is reachable from other machines, so it shows only the store it "
                          "was started on (`torchscope ui --root FOLDER`).")
            return
        st.text_input(
            "Run store",
            key="root",
            help=f"Folder of runs (default ${layout.ROOT_ENV} or ./{layout.DEFAULT_ROOT}), or a store URL "
            "(s3://bucket/prefix, read through a local cache). A torch-tb-profiler log folder works too.",
        )


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def md_escape(text: str) -> str:
    """``text`` with Markdown markup escaped, for user text (run names, tags) inside st.markdown /
    st.title: "[x](https://…)" stays text instead of becoming a link, ":red[x]" stays uncoloured."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


# Enough to keep a message that quotes user text (an error naming a URL's run) from forming links,
# images, code spans, colours or formulas, while paths and field names (``schema_version``,
# ``run.json``) read as written.
_MD_MESSAGE = re.compile(r"([\\`*\[\]<>$~|])")


def md_message(text: str) -> str:
    """An error message for st.warning / st.error with the Markdown that could form links escaped."""
    return _MD_MESSAGE.sub(r"\\\1", str(text))
