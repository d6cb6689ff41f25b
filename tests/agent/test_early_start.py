"""torchscope run's hot path (issue 11): the job starts before the launcher's heavy modules load, behind a gate.

The launcher makes the run folder, starts the job, and writes run.json while the job's
interpreter starts; the job's agent waits for run.json (the gate) before it writes anything. The
command line of the common forms is read by hand (cli.parse_fast): these tests hold it to what
argparse reads, and the duplicated names to their sources. No torch here: the jobs are
``python -c`` one-liners (a fraction of a second each).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli import build_parser
from profiler_agent import autoinstrument, cli, frameworks, job_start, launcher, options
from profiler_agent.runformat import RunStatus, layout, read_manifest

from .helpers import PROJECT_ROOT, env, only_run

# -- the names kept in two places -------------------------------------------------------------


def test_the_light_modules_spell_the_names_of_the_heavy_ones() -> None:
    assert job_start.RUN_DIR_ENV == options.RUN_DIR_ENV == autoinstrument.RUN_DIR_ENV
    assert job_start.OPTIONS_ENV == options.OPTIONS_ENV
    assert job_start.OWNER_ENV == options.OWNER_ENV
    assert job_start.AGENT_HOME_ENV == options.AGENT_HOME_ENV
    assert job_start.T0_ENV == options.T0_ENV
    assert autoinstrument._MANIFEST == layout.MANIFEST
    assert launcher._STOPPED_MAX_STEPS == options.STOPPED_MAX_STEPS
    assert set(autoinstrument.FRAMEWORK_MODULES) == set(frameworks._PATCHES)
    assert Path(job_start.BOOTSTRAP_DIR) == launcher.BOOTSTRAP_DIR
    assert (launcher.BOOTSTRAP_DIR / "sitecustomize.py").is_file()


def test_the_hot_path_knows_every_option_of_the_parser() -> None:
    run = build_parser("run")._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    known = {s for a in run._actions for s in a.option_strings if s not in ("-h", "--help")}
    assert known == cli.FAST_OPTIONS
    assert dataclasses.asdict(options.ProfileSchedule()) == cli.SCHEDULE_DEFAULTS


# -- the hot path reads what argparse reads ------------------------------------------------------

@functools.cache
def _parser() -> argparse.ArgumentParser:
    return build_parser("run")


def _slow(argv: list[str]) -> dict[str, object] | str:
    """What app.cli's argparse path makes of ``run <argv>``: the request's fields, or the error."""
    parser = _parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args, rest = parser.parse_known_args(["run", *argv])
    except SystemExit:
        return "usage error"
    if rest:
        args.command_args = [*getattr(args, "command_args", []), *rest]
    command = list(args.command_args or [])
    if command[:1] == ["--"]:
        command = command[1:]
    try:
        opts = options.options_from_args(args)
    except ValueError:
        return "bad value"
    if args.group is not None and not args.group.strip():
        return "bad group"
    return {"command": command, "name": args.name, "root": args.root or None, "tags": list(args.tags or ()),
            "notes": args.notes, "group": args.group.strip() if args.group else None, "options": opts}


def _fast(argv: list[str]) -> dict[str, object] | None:
    fast = cli.parse_fast(argv)
    if fast is None:
        return None
    opts = options.AgentOptions.from_mapping(json.loads(cli._json(fast["options"])))
    return {**fast, "root": fast["root"] or None, "group": fast["group"] or None, "options": opts}


COMMON = [
    ["--no-profile", "--no-graph", "--", "python", "train.py"],
    ["--root", "runs-x", "--name", "base", "--tags", "a", "b", "--notes", "n o", "--group", " g ", "--",
     "python", "-m", "pkg.train", "--lr", "0.1", "--", "x"],
    ["--max-steps", "3", "--wait", "0", "--warmup", "1", "--active", "2", "--repeat", "0", "--", "sh", "-c", "exit 3"],
    ["--anomaly-factor", "0", "--max-anomaly-windows", "5", "--system-interval", "0.25", "--with-stack",
     "--grad-norm", "--memory-timeline", "--no-module-scopes", "--no-evaluation-window", "--", "cmd"],
    ["--name=x", "--system-interval=2", "--tags", "--", "cmd"],
]


@pytest.mark.parametrize("argv", COMMON, ids=range(len(COMMON)))
def test_the_common_forms_take_the_hot_path_and_read_as_argparse_reads_them(argv: list[str]) -> None:
    fast = _fast(argv)
    assert fast is not None
    assert fast == _slow(argv)


@pytest.mark.parametrize("argv", [
    [], ["--", ], ["python", "train.py"], ["--help", "--", "x"], ["--no-prof", "--", "x"], ["--name", "--", "x"],
    ["--wait", "-1", "--", "x"], ["--active", "0", "--", "x"], ["--system-interval", "0", "--", "x"],
    ["--max-steps", "0", "--", "x"], ["--anomaly-factor", "1", "--", "x"], ["--anomaly-factor", "nan", "--", "x"],
    ["--group", " ", "--", "x"], ["--wait", "5_0", "--", "x"], ["--root", "s3://bucket/p", "--", "x"],
    ["--tags=a", "--", "x"], ["--no-graph=1", "--", "x"], ["-x", "--", "x"],
])
def test_anything_unusual_goes_to_argparse(argv: list[str]) -> None:
    assert cli.parse_fast(argv) is None


_TOKENS = st.sampled_from(["--name", "--root", "--tags", "--notes", "--group", "--max-steps", "--wait", "--active",
                           "--warmup", "--repeat", "--anomaly-factor", "--system-interval", "--no-profile",
                           "--no-graph", "--with-stack", "--max-anomaly-windows", "--no-prof", "-h", "a", "b c", "",
                           "0", "1", "3", "-1", "2.5", "1e-3", " 7", "x=y", "--name=q", "--wait=2", "--", "-"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_TOKENS, max_size=8), st.lists(_TOKENS, max_size=3))
def test_the_hot_path_never_reads_a_command_line_differently(head: list[str], tail: list[str]) -> None:
    argv = [*head, "--", "cmd", *tail]
    fast = _fast(argv)
    if fast is not None:
        assert fast == _slow(argv)


def test_options_travel_as_json_the_agent_reads() -> None:
    fast = cli.parse_fast(["--no-profile", "--wait", "2", "--system-interval", "1e-05", "--", "x"])
    assert fast is not None
    text = cli._json(fast["options"])
    read = options.read_env_options({options.OPTIONS_ENV: text})
    assert read == dataclasses.replace(options.AgentOptions(), profile=False, system_interval_s=1e-05,
                                       schedule=options.ProfileSchedule(wait=2))


# -- the gate ------------------------------------------------------------------------------------

def _gate(tmp_path: Path) -> tuple[dict[str, str], int]:
    r, w = os.pipe()
    info = os.fstat(r)
    environ = {autoinstrument.RUN_DIR_ENV: str(tmp_path), autoinstrument.GATE_ENV: f"{r}:{info.st_dev}:{info.st_ino}"}
    return environ, w


def test_the_gate_holds_the_agent_until_run_json_is_written(tmp_path: Path) -> None:
    environ, w = _gate(tmp_path)
    written = threading.Event()

    def launcher_side() -> None:
        time.sleep(0.2)
        (tmp_path / layout.MANIFEST).write_text("{}")
        written.set()
        os.close(w)

    thread = threading.Thread(target=launcher_side)
    thread.start()
    assert autoinstrument.wait_for_run(environ) is True
    assert written.is_set()
    assert autoinstrument.GATE_ENV not in environ  # later processes need no gate
    thread.join()


def test_a_gate_closed_without_a_run_leaves_the_agent_out(tmp_path: Path) -> None:
    environ, w = _gate(tmp_path)
    os.close(w)
    assert autoinstrument.wait_for_run(environ) is False


def test_a_process_without_the_pipe_looks_for_run_json(tmp_path: Path) -> None:
    r, w = os.pipe()
    os.close(r)
    os.close(w)  # the number names no pipe (or another file): not ours
    environ = {autoinstrument.RUN_DIR_ENV: str(tmp_path), autoinstrument.GATE_ENV: f"{r}:1:2"}
    assert autoinstrument.wait_for_run(environ, poll_s=0.05) is False
    environ[autoinstrument.GATE_ENV] = f"{r}:1:2"
    (tmp_path / layout.MANIFEST).write_text("{}")
    assert autoinstrument.wait_for_run(environ, poll_s=0.05) is True
    assert autoinstrument.wait_for_run({autoinstrument.RUN_DIR_ENV: str(tmp_path / "none")}) is True  # no gate


# -- whole launches (python -c jobs, no torch) ----------------------------------------------------

# The job checks what it was given: the bootstrap armed, the gate answered with run.json there.
_JOB = ("import os, sys\n"
        "armed = 'profiler_agent.autoinstrument' in sys.modules\n"
        "gated = os.environ.get('TORCHSCOPE_RUN_GATE') is not None\n"
        "from profiler_agent.autoinstrument import wait_for_run\n"
        "ok = wait_for_run()\n"
        "there = os.path.exists(os.path.join(os.environ['TORCHSCOPE_RUN_DIR'], 'run.json'))\n"
        "print('job', armed, gated, ok, there, os.environ['PYTHONPATH'].split(os.pathsep)[0].endswith('bootstrap'))\n"
        "sys.exit(int(sys.argv[1]))\n")

# The launcher in a process of its own, with the run's manifest written late (or never): the gate
# must hold the job until it exists. Prints which heavy modules had loaded when the job started.
_LAUNCHER = """
import sys, time, subprocess
import profiler_agent.runformat.writer as writer
mode = sys.argv[1]
real = writer.create_run
seen = []
def slow_create_run(*args, **kwargs):
    time.sleep(0.5)
    if mode == "fail":
        raise OSError(28, "No space left on device")
    return real(*args, **kwargs)
writer.create_run = slow_create_run
start = subprocess.Popen.__init__
def spy(self, *args, **kwargs):
    seen.append(sorted(m for m in sys.modules if m in HEAVY))
    start(self, *args, **kwargs)
subprocess.Popen.__init__ = spy
HEAVY = {"argparse", "profiler_agent.options", "profiler_agent.launcher", "profiler_agent.environment"}
from app.cli import main
code = main(sys.argv[2:])
print("heavy at start", seen[0] if seen else None, file=sys.stderr)
sys.exit(code)
"""


def _launch(tmp_path: Path, mode: str, exit_code: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _LAUNCHER, mode, "run", "--root", str(tmp_path / "runs"),
                           "--no-profile", "--", sys.executable, "-c", _JOB, str(exit_code)],
                          capture_output=True, text=True, env=env(), cwd=PROJECT_ROOT, timeout=120)


def test_the_job_starts_first_and_its_agent_waits_for_the_manifest(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "slow", exit_code=3)
    assert proc.returncode == 3, proc.stderr
    assert "job True True True True True" in proc.stdout  # armed, gated, run.json there when let in
    assert "heavy at start []" in proc.stderr  # none of the heavy modules before the job started
    run_dir = only_run(tmp_path / "runs")
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FAILED and m.exit_code == 3
    assert m.extra.get("job_pid") and m.versions.get("python")  # described beside the job
    assert "job True" in (run_dir / layout.STDOUT_LOG).read_text()


def test_a_manifest_that_cannot_be_written_leaves_the_job_running_unrecorded(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "fail", exit_code=4)
    assert proc.returncode == 4, proc.stderr
    assert "running the command without recording" in proc.stderr
    assert "job True True False False True" in proc.stdout  # its output still reaches the terminal
    assert list((tmp_path / "runs").iterdir()) == []  # no folder left without its manifest


def test_the_launchers_threads_leave_the_forwarded_signals_to_the_main_thread() -> None:
    import signal

    seen: list[set[int]] = []
    job_start.Background(lambda: seen.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, [])))).join(10)
    assert seen and set(job_start._FORWARDED) <= seen[0]  # blocked there: the kernel picks the main thread
    assert not set(job_start._FORWARDED) & set(signal.pthread_sigmask(signal.SIG_BLOCK, []))  # not here
