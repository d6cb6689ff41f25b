"""`torchscope ui`: start the Streamlit app on a run store (CLI layer).

Binds to 127.0.0.1 unless ``--host`` says otherwise; the store reaches the app through
``$TORCHSCOPE_RUNS``. A missing or empty store is not an error here: the app explains how to
record runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
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
        "true" if args.no_browser else "false",
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


def run(args: argparse.Namespace) -> int:
    cmd, env = build_command(args)
    root = env[layout.ROOT_ENV]
    print(f"Torchscope on http://{args.host}:{args.port}  (runs: {root}; Ctrl+C to stop)", file=sys.stderr)
    if not Path(root).exists():
        print(f"note: {root} does not exist yet; the app will show how to record runs", file=sys.stderr)
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 0
