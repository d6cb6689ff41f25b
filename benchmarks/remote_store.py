"""A run store on S3 (a local moto server) against the same store on local disk: `ls --json` as whole processes (benchmark).

    python -m benchmarks.remote_store [--runs 200] [--repeat 3] [--out benchmarks/results/remote_store.json]

Builds a synthetic store of N hand-made runs (tests/conftest.write_run: run.json, metrics.jsonl,
system.jsonl, two logs), uploads it to a bucket of a moto server started for the run (a
subprocess on a free port, stopped at the end), then times ``torchscope ls --json`` as whole
processes, each best of ``--repeat``:

- ``local``: the store on local disk (the peer);
- ``s3 cold``: ``--root s3://…`` with an empty read cache (lists the bucket, fetches every object);
- ``s3 warm``: the same with the cache filled (one listing, no object fetched: ETags unchanged).

The server runs on this machine, so network latency is near zero: the figures are Torchscope's
own cost (listing, fetching, writing the cache, checking ETags), not a real S3's round trips.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _start_moto() -> tuple[subprocess.Popen[str], str]:
    exe = Path(sys.executable).with_name("moto_server")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "moto.server"]
    proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"Running on (http://[\d.]+:\d+)", line)
        if m:
            # keep reading its log (a line per request): a full pipe would stop the server
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
            return proc, m.group(1)
    raise RuntimeError("moto_server did not start")


def _ls(root: str, env: dict[str, str], repeat: int, *, clear: Path | None = None) -> float:
    best = float("inf")
    for _ in range(repeat):
        if clear is not None:
            shutil.rmtree(clear, ignore_errors=True)
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "app", "ls", "--json", "--root", root], env=env,
                              capture_output=True, text=True, cwd=ROOT, check=False)
        best = min(best, time.perf_counter() - t)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import write_run  # the tests' realistic hand-made runs

    proc, endpoint = _start_moto()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            env = {**{k: v for k, v in os.environ.items() if not k.startswith(("TORCHSCOPE_", "AWS_"))},
                   "PYTHONPATH": str(ROOT), "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                   "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
                   "AWS_CONFIG_FILE": str(home / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
                   "TORCHSCOPE_CACHE": str(home / "cache")}
            os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
            local = home / "local"
            for i in range(args.runs):
                write_run(local, f"run{i:05d}", steps=20)
            import s3fs

            fs = s3fs.S3FileSystem(skip_instance_cache=True)
            fs.mkdir("bench")
            t = time.perf_counter()
            fs.put(str(local) + "/", "bench/runs", recursive=True)
            upload_s = time.perf_counter() - t
            url = "s3://bench/runs"
            result = {
                "runs": args.runs, "objects": len(fs.find("bench/runs")), "upload_s": upload_s,
                "local_s": _ls(str(local), env, args.repeat),
                "s3_cold_s": _ls(url, env, args.repeat, clear=home / "cache"),
                "s3_warm_s": _ls(url, env, args.repeat),
            }
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result["cold_over_local"] = result["s3_cold_s"] / result["local_s"]
    result["warm_over_local"] = result["s3_warm_s"] / result["local_s"]
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
