"""Waiting for a Streamlit server a test started (``torchscope ui`` or the browser tests' server)."""
from __future__ import annotations

import subprocess
import time
import urllib.request


def wait_healthy(proc: subprocess.Popen[bytes], port: int, timeout_s: float) -> str | None:
    """Poll ``/_stcore/health`` on 127.0.0.1:``port`` until it answers ok: None then, else why not
    ("exited with N" when ``proc`` ended first, or "not healthy in T s"). The caller reports it."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return None
        except OSError:
            time.sleep(0.3)
    return f"not healthy in {timeout_s:g} s"
