"""Browser-test fixtures: a streamlit server on a store of runs, and a headless Chromium page."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from app.ui.prefetch import PREFETCH_ENV
from profiler_agent.runformat import layout
from tests.browser.hostile import write_hostile_run, write_planted_run
from tests.servers import wait_healthy

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = PROJECT_ROOT / "test-output" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _not_caches(folder: str, names: list[str]) -> set[str]:
    """What a copy of a shared run leaves out: its trace cache (keyed by the traces' paths, so of no
    use to a copy) and writers' temporary files."""
    return {n for n in names if n == layout.CACHE_DIR or layout.is_temp_file(n)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server and everything in its process group (it runs in a session of its own):
    SIGTERM, then SIGKILL after 20 s. No test leaves a server running."""
    for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; SIGKILL whatever else of its group is left
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        break
    proc.wait(timeout=10)


def start_server(root: Path, home: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start `streamlit run app/streamlit_app.py` on ``root``; return (process, base URL) once healthy.

    Its output goes to ``home``/streamlit.log (a pipe nobody reads would block the server once full)."""
    port = _free_port()
    # as users run it: the other tabs' data is prefetched in the background (off for AppTests)
    env = {**os.environ, layout.ROOT_ENV: str(root), "HOME": str(home), "PYTHONPATH": str(PROJECT_ROOT),
           PREFETCH_ENV: "1"}
    log = home / "streamlit.log"
    with open(log, "wb") as out:
        proc = _popen_server(port, env, out)
    why = wait_healthy(proc, port, 90)
    if why is None:
        return proc, f"http://127.0.0.1:{port}"
    stop_server(proc)
    raise RuntimeError(f"streamlit {why}:\n{log.read_text(errors='replace')[-3000:]}")


def _popen_server(port: int, env: dict[str, str], out: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(PROJECT_ROOT / "app" / "streamlit_app.py"),
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=PROJECT_ROOT,
        start_new_session=True,
    )


@pytest.fixture(scope="session")
def browser_store(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """Real agent runs when sample_models can record them, plus hand-made and imported runs."""
    from tests.conftest import build_fixture_store

    root = tmp_path_factory.mktemp("browser_store")
    try:
        sample = request.getfixturevalue("sample_store")
        for run in sample.iterdir():
            if run.is_dir() and not run.name.startswith("."):  # not the shared store's catalog index
                # nor its caches: the other xdist worker may be writing into them meanwhile
                shutil.copytree(run, root / run.name, symlinks=True, ignore=_not_caches)
    except pytest.skip.Exception:
        pass
    build_fixture_store(root)
    write_hostile_run(root)  # dated a year ago: last in the store, out of the other flows' way
    shared = PROJECT_ROOT.parent / "shared" / "data" / "traces"
    if (shared / "two_ranks").is_dir():
        from app.data.tbprofiler import import_traces

        import_traces(shared / "two_ranks", root, name="two-ranks")
        gpu = shared / "gpu_before_after" / "control.json.gz"
        if gpu.is_file():  # one A100 trace: the every-tab flow of an imported GPU trace
            import_traces(gpu, root, name="gpu-control")
    return root


@pytest.fixture(scope="session")
def planted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(a run planted outside the browser store with stdout.log linked to a secret file, the secret)."""
    base = tmp_path_factory.mktemp("planted_outside")
    secret = base / "passwd"
    secret.write_text("root:x:0:0:BROWSER-SECRET-NEVER-SHOWN:/root:/bin/bash\n")
    return write_planted_run(base / "elsewhere", secret), secret.read_text().strip()


@pytest.fixture(scope="session")
def server(browser_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed")
    proc, url = start_server(browser_store, tmp_path_factory.mktemp("home"))
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1500, "height": 2400})  # type: ignore[attr-defined]
    pg = context.new_page()
    # Generous: a cold page on a loaded 2-core CI machine parses traces before it draws.
    pg.set_default_timeout(180_000)
    try:
        yield pg
    finally:
        context.close()


def screenshot(page: object, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path
