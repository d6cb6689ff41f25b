"""`torchscope ui`: start the Streamlit app on a run store (CLI layer).

Binds to 127.0.0.1 unless ``--host`` says otherwise; the store reaches the app through
``$TORCHSCOPE_RUNS``. A missing or empty store is not an error here: the app explains how to
record runs. Streamlit always runs headless (a non-headless Streamlit asks for an e-mail address
on its first start and exits when stdin is not a terminal); the browser is opened from here once
the server answers its health check.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import webbrowser
from collections.abc import Callable
from pathlib import Path

from profiler_agent.runformat import layout

HELP = "open the dashboard in the browser (streamlit, bound to 127.0.0.1 by default)"

APP_SCRIPT = Path(__file__).resolve().parents[1] / "streamlit_app.py"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        help=f"run store or torch-tb-profiler log folder "
        f"(default ${layout.ROOT_ENV} or ./{layout.DEFAULT_ROOT})",
    )
    parser.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; 0.0.0.0 exposes your runs to the network)",
    )
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser window")


def build_command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The streamlit command line and environment for ``args``."""
    root = layout.resolve_root(args.root).resolve()
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP_SCRIPT),
        "--server.port",
        str(args.port),
        "--server.address",
        args.host,
        "--server.headless",
        "true",  # never the first-run e-mail prompt; run() opens the browser itself
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",  # users browse runs; they do not edit the app
        "--client.toolbarMode",
        "viewer",  # no "Deploy" button (a local viewer, not an app to ship); "minimal" would also hide the
        # "Running…" status while traces are parsed
    ]
    env = {**os.environ, layout.ROOT_ENV: str(root)}
    return cmd, env


def browse_when_ready(url: str, proc: subprocess.Popen[bytes], *, timeout_s: float = 120.0,
                      open_url: Callable[[str], object] = webbrowser.open) -> bool:
    """Open ``url`` in the browser once the server at ``url`` answers its health check; give up
    when ``proc`` exits or after ``timeout_s``. Returns whether the browser was asked to open."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    open_url(url)
                    return True
        except OSError:
            time.sleep(0.3)
    return False


def run(args: argparse.Namespace) -> int:
    cmd, env = build_command(args)
    root = env[layout.ROOT_ENV]
    shown_host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    url = f"http://{shown_host}:{args.port}"
    print(f"Torchscope on {url}  (runs: {root}; Ctrl+C to stop)", file=sys.stderr)
    if not Path(root).exists():
        print(f"note: {root} does not exist yet; the app will show how to record runs", file=sys.stderr)
    proc = subprocess.Popen(cmd, env=env)
    if not args.no_browser:
        threading.Thread(target=browse_when_ready, args=(url, proc), daemon=True).start()

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # `kill` of torchscope ui stops its server too, never orphans it

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
