"""`torchscope ui`: start the Streamlit app on a run store (CLI layer).

Binds to 127.0.0.1 unless ``--host`` says otherwise (any other address gets a warning at run
time, and the banner names the address really bound); the store reaches the app through
``$TORCHSCOPE_RUNS``. A missing or empty store is not an error here: the app explains how to
record runs. Streamlit always runs headless (a non-headless Streamlit asks for an e-mail address
on its first start and exits when stdin is not a terminal); the browser is opened from here once
the server answers its health check.
"""

from __future__ import annotations

import argparse
import ipaddress
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
from profiler_agent.runformat.store_url import check_store_url, is_store_url

HELP = "open the dashboard in the browser (streamlit, bound to 127.0.0.1 by default)"

APP_SCRIPT = Path(__file__).resolve().parents[1] / "streamlit_app.py"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        help=f"run store (a folder or a URL: s3://bucket/prefix) or torch-tb-profiler log folder "
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
    value = args.root or os.environ.get(layout.ROOT_ENV) or ""
    # A store URL reaches the app as it is (checked here, before the server starts); the app reads it
    # through its local mirror (app.workspace.stores).
    root: str | Path = check_store_url(value) if is_store_url(value) else layout.resolve_root(args.root).resolve()
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
        "--runner.magicEnabled",
        "false",  # no page writes a bare expression: each page script is compiled as it is (.streamlit/config.toml)
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


_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_STOP_GRACE_S = 10.0  # how long Streamlit may take to stop after the signal, before SIGKILL


def is_loopback(host: str) -> bool:
    """True when ``host`` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name or an interface's address: other machines may reach it


def server_urls(host: str, port: int) -> tuple[str, str]:
    """(the URL the server is bound to, the URL to open on this machine)."""
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    bound = f"http://{shown}:{port}"
    local = f"http://127.0.0.1:{port}" if host in ("0.0.0.0", "::", "[::]", "") else bound
    return bound, local


def public_bind_warning(host: str, port: int) -> str | None:
    """The run-time warning for a bind that other machines can reach; None for a loopback one."""
    if is_loopback(host):
        return None
    return (f"WARNING: --host {host} serves the app to every machine that can reach this one on port {port}, "
            "with no login: anyone there can browse your runs (commands, configs, logs, traces). "
            f"To reach it from another machine, keep the default 127.0.0.1 and use an SSH tunnel "
            f"(ssh -L {port}:127.0.0.1:{port} THIS_HOST).")


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM it when `torchscope ui` dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the signal forwarding below still stops the server


def run(args: argparse.Namespace) -> int:
    """Serve the app until the server exits or a signal stops it; returns the server's exit code
    (0 when stopped by SIGINT, SIGTERM or SIGHUP).

    The server runs in a process group of its own, so that a terminal's Ctrl+C reaches it once
    (forwarded from here) rather than twice; SIGTERM, SIGINT and SIGHUP to `torchscope ui` are
    forwarded to it, and it is killed (its whole group) when it has not stopped in 10 s: a
    stopped `torchscope ui` never leaves a server holding the port.
    """
    cmd, env = build_command(args)
    root = env[layout.ROOT_ENV]
    bound, local = server_urls(args.host, args.port)
    shown = bound if bound == local else f"{bound} (on this machine: {local})"
    print(f"Torchscope on {shown}  (runs: {root}; Ctrl+C to stop)", file=sys.stderr)
    warning = public_bind_warning(args.host, args.port)
    if warning:
        print(warning, file=sys.stderr)
    if not is_store_url(root) and not Path(root).exists():
        print(f"note: {root} does not exist yet; the app will show how to record runs", file=sys.stderr)
    received: list[int] = []
    child: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        if child and child[0].poll() is None:
            child[0].send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in _FORWARDED}  # before the child exists: no gap
    try:
        proc = subprocess.Popen(cmd, env=env, process_group=0,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        child.append(proc)
        if received:  # a signal came while the child was being started
            proc.send_signal(received[0])
        elif not args.no_browser:
            threading.Thread(target=browse_when_ready, args=(local, proc), daemon=True).start()
        return _wait(proc, received)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _wait(proc: subprocess.Popen[bytes], received: list[int]) -> int:
    """Wait for the server; once a signal was forwarded, give it _STOP_GRACE_S, then kill its group."""
    stop_by: float | None = None
    while True:
        try:
            code = proc.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if received and stop_by is None:
                stop_by = time.monotonic() + _STOP_GRACE_S
            if stop_by is not None and time.monotonic() > stop_by:
                _kill_group(proc)
                code = proc.wait()
                break
    _kill_group(proc)  # anything the server started in its group goes with it
    return 0 if received else code


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
