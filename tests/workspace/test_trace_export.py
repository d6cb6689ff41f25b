"""app.workspace.trace_export: a run's trace file cut to a range, as a Chrome trace JSON file."""
from __future__ import annotations

import gzip
import json

import pytest

from app.errors import TraceError
from app.workspace.trace_export import export_trace_range
from profiler_agent.runformat import layout


def test_export_reads_the_run_file_and_keeps_the_range(make_run) -> None:  # noqa: ANN001
    run = make_run("exported")
    folder = run / layout.TRACES_DIR
    folder.mkdir(exist_ok=True)
    trace = folder / layout.trace_file_name("host_1", 1, gzip=True)
    doc = {"distributedInfo": {"rank": 0}, "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "X", "name": "early", "ts": 1.0, "dur": 1.0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "kept", "ts": 100.0, "dur": 10.0, "pid": 1, "tid": 1},
    ]}
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    out = json.loads(export_trace_range(run, trace, 50.0, 200.0))
    assert [e["name"] for e in out["traceEvents"]] == ["process_name", "kept"]
    assert out["distributedInfo"] == {"rank": 0}
    trace.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X"'))  # cut short
    with pytest.raises(TraceError, match=trace.name):
        export_trace_range(run, trace, 50.0, 200.0)
