"""`torchscope ui` as a server: a public bind is announced as such, and a stopped `torchscope ui`
never leaves its Streamlit child holding the port (SIGTERM, SIGINT, SIGHUP, SIGKILL)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import build_parser
from app.cli.ui_cmd import public_bind_warning, server_urls
from tests.process_tree import descendants
from tests.servers import wait_healthy

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    """Nothing listens on the port (a fresh server, which sets SO_REUSEADDR as Tornado does, can bind it;
    connections in TIME_WAIT from the health checks do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


@pytest.mark.fault("public bind")
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "myhost.example"])
def test_public_host_is_warned_and_shown(host):
    warning = public_bind_warning(host, 8501)
    assert warning and f"--host {host}" in warning and "no login" in warning
    bound, _ = server_urls(host, 8501)
    assert "127.0.0.1" not in bound and ":8501" in bound


@pytest.mark.fault("public bind")
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.5", "::1", "localhost"])
def test_loopback_host_is_not_warned(host):
    assert public_bind_warning(host, 8501) is None


def _start_ui(store: Path, home: Path, *argv: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = _free_port()
    log = home / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", "ui", "--root", str(store), "--port", str(port), "--no-browser", *argv],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "HOME": str(home), "PYTHONPATH": str(PROJECT_ROOT)},
            cwd=PROJECT_ROOT, start_new_session=True,
        )
    return proc, port, log


def _wait_healthy(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    why = wait_healthy(proc, port, 90)
    if why is not None:
        pytest.fail(f"torchscope ui {why}:\n" + log.read_text())


def _stop_all(proc: subprocess.Popen[bytes], pids: list[int]) -> None:
    for pid in [proc.pid, *pids]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone(pids: list[int], port: int, timeout_s: float = 20) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if not any(_alive(p) for p in pids) and _port_free(port):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
@pytest.mark.fault("orphan server")
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_signal_to_ui_stops_its_server(fixture_store, tmp_path, sig):
    """A real `torchscope ui`: its Streamlit child is found, the signal is sent to `torchscope ui`
    alone, and the child must be gone and the port free (SIGKILL: through the parent-death signal)."""
    proc, port, log = _start_ui(fixture_store[0], tmp_path)
    children: list[int] = []
    try:
        _wait_healthy(proc, port, log)
        children = descendants(proc.pid)
        assert children, "torchscope ui serves through a child process"
        os.kill(proc.pid, sig)
        rc = proc.wait(timeout=30)
        assert _gone(children, port), f"the server outlived `torchscope ui` ({sig.name}): {children}"
        if sig is not signal.SIGKILL:
            assert rc == 0, log.read_text()
    finally:
        _stop_all(proc, children)


@pytest.mark.slow
@pytest.mark.fault("public bind")
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_public_bind_banner_at_run_time(fixture_store, tmp_path):
    """The banner names the address really bound and warns; SIGHUP (the terminal closed) then stops it all."""
    proc, port, log = _start_ui(fixture_store[0], tmp_path, "--host", "0.0.0.0")
    children: list[int] = []
    try:
        _wait_healthy(proc, port, log)
        children = descendants(proc.pid)
        out = log.read_text()
        assert f"Torchscope on http://0.0.0.0:{port}" in out
        assert "WARNING: --host 0.0.0.0" in out
        os.kill(proc.pid, signal.SIGHUP)
        assert proc.wait(timeout=30) == 0
        assert _gone(children, port)
    finally:
        _stop_all(proc, children)


@pytest.mark.fault("public bind")
def test_parser_keeps_loopback_default():
    assert build_parser().parse_args(["ui"]).host == "127.0.0.1"
