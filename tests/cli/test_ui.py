"""`torchscope ui`: binds to 127.0.0.1, passes the store, serves the app."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from app.cli import build_parser
from app.cli.ui_cmd import APP_SCRIPT, build_command
from profiler_agent.runformat import layout
from tests.servers import wait_healthy


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["ui", *argv])


def test_defaults_bind_localhost_and_pass_root(tmp_path):
    cmd, env = build_command(_args("--root", str(tmp_path)))
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "8501"
    assert str(APP_SCRIPT) in cmd and APP_SCRIPT.is_file()
    assert env[layout.ROOT_ENV] == str(tmp_path.resolve())
    assert cmd[cmd.index("--client.toolbarMode") + 1] == "viewer"  # no "Deploy" button, still a status
    # headless even when a browser is wanted: otherwise Streamlit's first start asks for an e-mail
    # address and exits when stdin is not a terminal (`make demo` in CI, a script)
    assert cmd[cmd.index("--server.headless") + 1] == "true"


def test_host_and_port_options(tmp_path):
    cmd, _ = build_command(
        _args("--root", str(tmp_path), "--host", "0.0.0.0", "--port", "9999", "--no-browser")
    )
    assert cmd[cmd.index("--server.address") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--server.port") + 1] == "9999"
    assert cmd[cmd.index("--server.headless") + 1] == "true"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("browser", [False, True], ids=["no-browser", "browser"])
def test_ui_serves_the_app(fixture_store, tmp_path, browser):
    """A fresh HOME (no ~/.streamlit), stdin not a terminal: the server comes up and, unless
    --no-browser, the browser ($BROWSER, here a script writing the URL to a file) is opened."""
    port = _free_port()
    opened = tmp_path / "opened.txt"
    fake_browser = f"{sys.executable} -c \"import sys; open({str(opened)!r}, 'w').write(sys.argv[1])\" %s"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "ui", "--root", str(fixture_store[0]), "--port", str(port),
         *([] if browser else ["--no-browser"])],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HOME": str(tmp_path), "BROWSER": fake_browser},
        start_new_session=True,
    )
    try:
        why = wait_healthy(proc, port, 60)
        if why is not None:
            pytest.fail(f"torchscope ui {why}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert r.status == 200
        if browser:
            deadline = time.time() + 20
            while not opened.exists() and time.time() < deadline:
                time.sleep(0.2)
            assert opened.read_text() == f"http://127.0.0.1:{port}"
        else:
            time.sleep(1)
            assert not opened.exists()
    finally:
        proc.terminate()  # torchscope ui stops its streamlit server on SIGTERM
        proc.wait(timeout=20)
        time.sleep(0.5)
        try:  # the server must be gone with it (tests leave no servers running)
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
            leaked = True
        except OSError:
            leaked = False
        if leaked:
            os.killpg(proc.pid, 15)
        assert not leaked, "torchscope ui left its streamlit server running after SIGTERM"
