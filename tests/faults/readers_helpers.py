"""Shared by the readers' fault tests: bombs written streaming, and readers run in a child with an RSS report."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write_gzip_bomb(path: Path, head: bytes, unit: bytes, inflated_bytes: int, tail: bytes = b"") -> Path:
    """A gzip file of ``head`` + ``unit`` repeated up to ``inflated_bytes`` + ``tail``: one MiB of
    ``unit`` is compressed once and its gzip member written again and again (concatenated members
    are one gzip stream), so a GB-sized bomb is a MB on disk and takes no time to build."""
    block = unit * max(1, (1 << 20) // len(unit))
    member = gzip.compress(block, compresslevel=9)
    with path.open("wb") as f:
        f.write(gzip.compress(head))
        for _ in range(max(1, inflated_bytes // len(block))):
            f.write(member)
        f.write(gzip.compress(tail))
    return path


def run_reader(code: str, *, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[str, int]:
    """Run ``code`` in a fresh interpreter; return (its stdout + stderr, its peak RSS in MiB)."""
    wrapper = textwrap.dedent(code) + textwrap.dedent("""
        import resource as _r, sys as _s
        print("MAXRSS_KB", _r.getrusage(_r.RUSAGE_SELF).ru_maxrss)
    """)
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, timeout=timeout,
                          env=full_env, cwd=ROOT)
    out = proc.stdout + proc.stderr
    kb = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("MAXRSS_KB")]
    assert kb, f"the reader did not finish (rc {proc.returncode}):\n{out[-3000:]}"
    return out, kb[0] // 1024


def baseline_rss_mib(imports: str) -> int:
    """Peak RSS of a child that only imports what the reader needs (what the bound is added to)."""
    return run_reader(imports)[1]


def records_json(n: int) -> bytes:
    return json.dumps([[i, 2, 4096, 4] for i in range(n)]).encode()
