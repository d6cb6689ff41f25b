"""A run whose every user-controlled field holds script payloads, for the browser's XSS checks.

Each payload, if the page ever ran it, sets ``window.__pwned``; the test asserts it stays undefined
and that the text is shown literally. The run is dated in the past, so it sorts last in the store
and the other browser flows (which open the newest runs) do not meet it.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["PAYLOAD", "OP_PAYLOAD", "GRAPH_SVG_PAYLOAD", "HOSTILE_NAME", "write_hostile_run", "write_planted_run"]

TINY_TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"

PAYLOAD = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
LINK_PAYLOAD = "[click](javascript:window.__pwned=3)"
SVG_PAYLOAD = '"><svg onload="window.__pwned=4">'
OP_PAYLOAD = '<img src=y onerror="window.__pwned=5">::op'
# The backward graph's SVG: a script, an onload and a foreign object, all of which would run inline.
GRAPH_SVG_PAYLOAD = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="240pt" height="480pt" viewBox="0 0 240 480" '
    'onload="window.__pwned=6"><script>window.__pwned=7</script>'
    '<rect width="240" height="480" fill="#fff8e1"/><text x="20" y="40" font-size="18">HostileBackward0</text>'
    '<foreignObject width="200" height="50"><img xmlns="http://www.w3.org/1999/xhtml" src="x" '
    'onerror="window.__pwned=8"/></foreignObject></svg>'
)
HOSTILE_NAME = f"xss {PAYLOAD}"


def write_hostile_run(root: Path) -> Path:
    """A finished run with payloads in its name, tags, notes, config, logs and op names; returns its folder."""
    from tests.conftest import write_run

    run = write_run(
        root, HOSTILE_NAME,
        tags=(PAYLOAD, LINK_PAYLOAD),
        config={"lr": 0.01, "payload": PAYLOAD, SVG_PAYLOAD: LINK_PAYLOAD, "nested": {"html": SVG_PAYLOAD}},
        notes=f"{PAYLOAD}\n{LINK_PAYLOAD}\n{SVG_PAYLOAD}",
    )
    (run / layout.STDOUT_LOG).write_text(f"step 1\n{PAYLOAD}\n{SVG_PAYLOAD}\n")
    (run / layout.STDERR_LOG).write_text(f"{LINK_PAYLOAD}\n")
    (run / layout.TRACEBACK_LOG).write_text(f"Traceback (most recent call last):\nRuntimeError: {PAYLOAD}\n")
    trace = json.loads(gzip.decompress(TINY_TRACE.read_bytes()))
    for event in trace["traceEvents"]:
        if event.get("name") == "aten::mm":  # the top operator: in the chart and the first rows
            event["name"] = OP_PAYLOAD
    traces = run / layout.TRACES_DIR
    traces.mkdir(exist_ok=True)
    (traces / "host_1.1700000000000000000.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode()))
    _write_hostile_graph(run)
    old = "20200101-000000-" + run.name.split("-", 2)[2]  # sorts after every run made today
    run = run.rename(run.parent / old)
    year_ago = time.time() - 86400 * 365
    rf.update_manifest(run, id=old, started_at=year_ago, ended_at=year_ago + 1.0, heartbeat=year_ago + 1.0)
    return run


def _write_hostile_graph(run: Path) -> None:
    """The Graph tab's files: the SVG above, and a module tree whose names and types are payloads."""
    (run / layout.GRAPH_DIR).mkdir(exist_ok=True)
    (run / layout.GRAPH_SVG).write_text(GRAPH_SVG_PAYLOAD, encoding="utf-8")

    def module(name: str, type_: str, params: int, children: list[dict[str, object]]) -> dict[str, object]:
        return {"name": name, "type": type_, "params": params, "own_params": params - sum(c["params"] for c in children),
                "trainable_params": params, "flops": 0, "output_shape": None, "extra_repr": PAYLOAD,
                "children": children}

    root = module("", PAYLOAD, 300, [module(PAYLOAD, OP_PAYLOAD, 200, []), module("head", "Linear", 100, [])])
    (run / layout.MODULE_TREE).write_text(json.dumps({"format": 1, "root": root, "nodes": 3, "truncated": False}),
                                          encoding="utf-8")


def write_planted_run(folder: Path, secret: Path) -> Path:
    """A run outside any store, its stdout.log a link to ``secret`` (a file another user planted)."""
    from tests.conftest import write_run

    run = write_run(folder, "planted")
    (run / layout.STDOUT_LOG).unlink()
    (run / layout.STDOUT_LOG).symlink_to(secret)
    return run
