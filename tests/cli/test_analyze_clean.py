"""`torchscope analyze` text for people (issue 16): no device columns without device activity,
capped shares explained, memory peaks in bytes or "unknown", empty files named; --json keeps all."""
from __future__ import annotations

import json
from pathlib import Path

from app.cli import main
from tests.data.issue16 import traces as T


def test_cpu_trace_text_has_no_device_columns(tmp_path: Path, capsys) -> None:
    doc = T.threads_and_annotations()
    doc["traceEvents"] += T.memory_deltas_only()["traceEvents"][1:]  # Bytes deltas only
    folder = tmp_path / "t"
    T.write(folder / "rank0.pt.trace.json", doc)
    (folder / "rank1.pt.trace.json").write_bytes(b"")
    assert main(["analyze", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "KERNEL" not in out and "MEMCPY" not in out and "DEVICE SELF" not in out
    assert "no device activity" in out
    assert "gloo:all_reduce (2 threads)" in out and "100.0%" in out
    assert "allocated 3.0 MiB (running sum" in out and "reserved unknown" in out
    assert "rank1.pt.trace.json: skipped, the file is empty" in out
    assert main(["analyze", str(folder), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "kernel_us" in data["steps"][0] and "device_self_us" in data["ops"][0]  # --json keeps every field
    assert data["memory"]["cpu"]["peak_source"] == "running_sum"
