"""The zero-code launcher behind ``torchscope run``: create the run, start the job instrumented, mark the end (agent layer).

The launcher never imports torch. It creates the run folder, starts the user's command with
the bootstrap on PYTHONPATH (every Python process of the job arms the agent), copies the
job's stdout/stderr to the terminal and to logs/, keeps the heartbeat fresh, forwards
SIGINT/SIGTERM, and finally writes the status.

The job sees exactly the signals it would see unwrapped. Without a controlling terminal the job
runs in a process group of its own, so a signal sent to the launcher's group (``kill -INT -PGID``,
``timeout``, a script's ``kill %1``) reaches the job once, through the launcher, and never twice.
At a terminal, where the launcher is in the foreground group, the job stays in that group (so it
can read the terminal) and a Ctrl-C that the terminal already sent it is not forwarded. A signal
the launcher inherited as ignored (SIGINT for a background job of a script) stays ignored: no
handler is installed for it, and the job inherits the ignored disposition as it would unwrapped. It returns the job's exit code unchanged
(128 + N for a job killed by signal N, as a shell reports it), except after ``--max-steps``:
when the agent ended the job (run.json ``"stopped": "max_steps"``) the run is ``finished``
and the code is 0; a different code of the job's own is kept as ``job_exit_code``.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING

from .environment import describe_launch, read_rank_info
from .heartbeat import Heartbeat
from .options import AGENT_HOME_ENV, STOPPED_MAX_STEPS, AgentOptions, write_env_options

# Submodules, not the package's names: the reader (read_manifest) loads only for --max-steps.
from .runformat import layout
from .runformat.errors import TorchscopeError
from .runformat.schema import Artifact, ArtifactKind, Manifest, RunStatus
from .runformat.store_url import check_store_url, is_store_url, scrub_url, spool_root
from .runformat.writer import (
    create_run,
    remove_temp_files,
    reserve_status_space,
    update_manifest,
    update_manifest_final,
)

if TYPE_CHECKING:
    from .upload import Uploader

__all__ = ["LaunchRequest", "launch", "default_run_name", "BOOTSTRAP_DIR"]

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
_PACKAGE_HOME = Path(__file__).resolve().parent.parent
_KILL_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGKILL, signal.SIGHUP}
# Signals that reach the launcher are passed on to the job (their default action would end the
# launcher and leave the job alone); the first four ask it to stop, and make the run `killed`.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_FORWARDED = (*_STOP_SIGNALS, signal.SIGUSR1, signal.SIGUSR2)
# What a terminal sends to its whole foreground group: the job, in that group, has it already.
_TERMINAL_SIGNALS = {signal.SIGINT, signal.SIGQUIT, signal.SIGHUP}


@dataclass(frozen=True)
class LaunchRequest:
    """What to run and where to record it."""

    command: tuple[str, ...]
    name: str | None = None
    root: Path | str | None = None  # a local folder, or a store URL (s3://bucket/prefix): spooled and uploaded
    tags: tuple[str, ...] = ()
    notes: str = ""
    group: str | None = None  # replicates of one configuration: run.json "group"
    options: AgentOptions = field(default_factory=AgentOptions)


def default_run_name(command: tuple[str, ...]) -> str:
    """A name from the command: the script (``train`` for ``python train.py``) or the module."""
    args = list(command)
    if args and Path(args[0]).name.startswith("python"):
        args = args[1:]
        while args and args[0].startswith("-") and args[0] != "-m":
            args = args[1:]
        if args[:1] == ["-m"] and len(args) > 1:
            return args[1].rsplit(".", 1)[-1]
    return Path(args[0]).stem if args else "run"


def launch(request: LaunchRequest) -> int:
    """Run the job instrumented and return its exit code. Raises TorchscopeError without a command."""
    if not request.command:
        raise TorchscopeError("no command to run; usage: torchscope run [options] -- python train.py ...")
    store_url = _store_url(request.root)
    # A URL is refused here, before the job starts, when its scheme or backend is missing; a
    # supported one is recorded in the local spool and uploaded by the launcher (upload.py).
    root = spool_root(check_store_url(store_url)) if store_url else layout.resolve_root(request.root)
    name = request.name or default_run_name(request.command)
    # "group" stays a top-level field that readers keep in Manifest.extra (old runs lack it).
    extra: dict[str, object] = {"group": request.group} if request.group else {}
    if store_url:
        from .upload import UPLOAD_FIELD  # the uploader loads only for a store URL

        extra[UPLOAD_FIELD] = {"url": scrub_url(store_url), "state": "uploading", "errors": 0}
    try:
        # git and package versions (~50 ms: subprocesses, importlib.metadata) are filled in beside
        # the job's start-up (_Job.run), not before it: the launcher's cost is every job's cost.
        run_dir, manifest = create_run(root, name, command=list(request.command), tags=list(request.tags),
                                       notes=request.notes, extra=extra, world_size=read_rank_info().world_size)
    except OSError as e:
        # The job matters more than its record: run it plain.
        print(f"torchscope run: cannot create a run in {root} ({e}); running the command without recording",
              file=sys.stderr)
        return _run_plain(request.command)
    shown = f"{scrub_url(store_url).rstrip('/')}/{run_dir.name} (spooled in {run_dir})" if store_url else run_dir
    print(f"torchscope run: recording {shown}", file=sys.stderr)
    return _Job(run_dir, request, t0=manifest.started_at or time.time(), store_url=store_url).run()


def _store_url(root: Path | str | None) -> str | None:
    """The store URL that ``root`` (or $TORCHSCOPE_RUNS when it is None) names, or None for a folder."""
    value = str(root) if root is not None and str(root) != "" else os.environ.get(layout.ROOT_ENV)
    return value if value and not isinstance(root, Path) and is_store_url(value) else None


def _run_plain(command: tuple[str, ...]) -> int:
    """Become the command (exec in place): unrecorded, it gets exactly its signals and its exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], list(command))  # noqa: S606 - the user's own command
    except OSError as e:
        print(f"torchscope run: cannot start {command[0]!r}: {e}", file=sys.stderr)
    return 127


def _exit_code(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode


def _child_env(run_dir: Path, options: AgentOptions, t0: float) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(BOOTSTRAP_DIR), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[AGENT_HOME_ENV] = str(_PACKAGE_HOME)
    env.setdefault("PYTHONUNBUFFERED", "1")  # the job's output reaches the terminal and logs live
    write_env_options(env, str(run_dir.resolve()), options, owner_pid=os.getpid(), t0=t0)
    return env


def _describe_launch(run_dir: Path, pid: int) -> None:
    """Record the job's pid, git state and package versions; the job's own values win where it wrote first."""
    with contextlib.suppress(Exception):
        info = describe_launch()

        def change(m: Manifest) -> Manifest:
            return m.replace(git=m.git or info["git"], versions={**info["versions"], **m.versions},
                             extra={**m.extra, "job_pid": pid})

        update_manifest(run_dir, change)


def _die_with_parent() -> None:
    # Linux: if the launcher is killed (even SIGKILL) the job gets SIGTERM, flushes and stops.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _Job:
    """One wrapped command from start to final status."""

    def __init__(self, run_dir: Path, request: LaunchRequest, *, t0: float, store_url: str | None = None) -> None:
        self.run_dir = run_dir
        self.store_url = store_url
        self.uploader: Uploader | None = None  # only for a store URL
        self.request = request
        self.t0 = t0
        self.proc: subprocess.Popen[bytes] | None = None
        self.signals: list[int] = []
        self.job_exit_code: int | None = None  # the job's own code when --max-steps overrode it
        self.own_group = False  # the job runs in a process group of its own (no terminal)

    def run(self) -> int:
        status, code = RunStatus.FAILED, 1
        previous: dict[int, object] = {}
        # So that the final status fits even when the job fills the disk. 256 KB written and
        # fsynced (1.5-28 ms on this project's VM disk) beside the job's start, not before it:
        # the job's interpreter takes longer than that to start, and _finish waits for it.
        reserve = threading.Thread(target=reserve_status_space, args=(self.run_dir,),
                                   name="torchscope-reserve", daemon=True)
        reserve.start()
        try:
            # Handlers first: a signal arriving while the job starts is forwarded once it exists.
            for sig in _FORWARDED:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # inherited as ignored: keep it so
                    previous[sig] = signal.signal(sig, self._on_signal)
            self.own_group = not _in_terminal_foreground()
            try:
                self.proc = subprocess.Popen(  # noqa: S603 - the user's own command
                    list(self.request.command), env=_child_env(self.run_dir, self.request.options, self.t0),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                    process_group=0 if self.own_group else None,
                )
            except OSError as e:
                print(f"torchscope run: cannot start {self.request.command[0]!r}: {e}", file=sys.stderr)
                code = 127
                return code
            for pending in self.signals:
                self.proc.send_signal(pending)
            describe = threading.Thread(target=_describe_launch, args=(self.run_dir, self.proc.pid),
                                        name="torchscope-describe", daemon=True)
            describe.start()
            heartbeat = Heartbeat(self.run_dir).start()
            if self.store_url:  # a thread of the launcher: the job's process never uploads
                from .upload import Uploader

                self.uploader = Uploader(self.run_dir, self.store_url).start()
            tees = [self._tee(self.proc.stdout, sys.stdout, layout.STDOUT_LOG),
                    self._tee(self.proc.stderr, sys.stderr, layout.STDERR_LOG)]
            returncode = self.proc.wait()
            # A background process the job left behind may hold the pipes open: do not wait for it.
            deadline = time.monotonic() + 10
            for tee in tees:
                tee.join(timeout=max(0.0, deadline - time.monotonic()))
            heartbeat.stop()
            describe.join(timeout=30)
            code = _exit_code(returncode)
            status = self._status(returncode)
            if not self._asked_to_stop() and self._stopped_at_max_steps():
                # The agent ended the job after --max-steps: that is a finished run, whatever the
                # job's code did on its way out (a `finally`, a shutdown error) -- kept as job_exit_code.
                self.job_exit_code = code if code != 0 else None
                status, code = RunStatus.FINISHED, 0
            return code
        finally:
            # The status first, handlers back after: a late Ctrl-C must not cut the final write.
            reserve.join(timeout=30)
            self._finish(status, code)
            self._finish_upload()
            for signum, handler in previous.items():
                signal.signal(signum, handler)  # type: ignore[arg-type]

    def _status(self, returncode: int) -> RunStatus:
        if self._asked_to_stop():
            return RunStatus.KILLED
        if returncode < 0:
            return RunStatus.KILLED if -returncode in _KILL_SIGNALS else RunStatus.FAILED
        return RunStatus.FINISHED if returncode == 0 else RunStatus.FAILED

    def _finish(self, status: RunStatus, code: int) -> None:
        now = time.time()
        # The job has ended: whatever temporary file a writer of it left (killed mid-export, disk
        # full) is stale. Readers ignore such files; this removes them.
        remove_temp_files(self.run_dir)
        try:
            logs = [Artifact(ArtifactKind.LOG, log, bytes=(self.run_dir / log).stat().st_size)
                    for log in (layout.STDOUT_LOG, layout.STDERR_LOG) if (self.run_dir / log).is_file()]
            job_code = self.job_exit_code

            def change(m: Manifest) -> Manifest:
                # One locked rewrite of run.json for the logs and the status (each costs an fsync).
                known = {a.path for a in logs}
                m = m.replace(artifacts=(*[a for a in m.artifacts if a.path not in known], *logs))
                if job_code is None:
                    return m
                return m.replace(extra={**m.extra, "job_exit_code": job_code})

            m = update_manifest_final(self.run_dir, change, status=status, ended_at=now, heartbeat=now,
                                      exit_code=code)
        except Exception as e:  # noqa: BLE001 - report, but keep the job's exit code
            _say(f"torchscope run: could not mark the run {status} ({e}); readers will show it as crashed")
        else:
            why = ""
            if m.extra.get("stopped") == STOPPED_MAX_STEPS and status is RunStatus.FINISHED:
                why = f" after --max-steps {self.request.options.max_steps}"
                if self.job_exit_code is not None:
                    why += f"; the job itself exited with {self.job_exit_code}"
            _say(f"torchscope run: {status}{why} (exit code {code}) → {self.run_dir}")

    def _finish_upload(self) -> None:
        if self.uploader is None:
            return
        url = scrub_url(self.store_url or "")
        try:
            complete = self.uploader.finish()
        except Exception as e:  # noqa: BLE001 - the job's exit code matters more than the upload
            _say(f"torchscope run: upload to {url} failed ({type(e).__name__}); "
                 f"finish it with: torchscope sync --root {url}")
            return
        if complete:
            _say(f"torchscope run: uploaded → {url.rstrip('/')}/{self.run_dir.name}")
        else:
            _say(f"torchscope run: upload to {url} incomplete ({self.uploader.last_error}); the run is "
                 f"kept in {self.run_dir}; finish it with: torchscope sync --root {url}")

    def _asked_to_stop(self) -> bool:
        return any(s in _STOP_SIGNALS for s in self.signals)

    def _stopped_at_max_steps(self) -> bool:
        if self.request.options.max_steps is None:
            return False
        from .runformat.reader import read_manifest

        try:
            return read_manifest(self.run_dir).extra.get("stopped") == STOPPED_MAX_STEPS
        except Exception:  # noqa: BLE001 - an unreadable manifest: judge by the exit code alone
            return False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        if signum in _STOP_SIGNALS and sum(s in _STOP_SIGNALS for s in self.signals) >= 3:
            proc.kill()  # asked three times: stop waiting for a clean exit
        elif self.own_group or not (signum in _TERMINAL_SIGNALS and _in_terminal_foreground()):
            # In its own group the job got nothing from the group's sender: forward exactly once.
            proc.send_signal(signum)

    def _tee(self, source: IO[bytes] | None, terminal: IO[str], rel: str) -> threading.Thread:
        log: IO[bytes] | None = None
        with contextlib.suppress(OSError):
            (self.run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            log = open(self.run_dir / rel, "ab", buffering=0)  # noqa: SIM115 - closed by the thread
        thread = threading.Thread(target=_copy_stream, args=(source, terminal, log), daemon=True,
                                  name=f"torchscope-tee-{Path(rel).stem}")
        thread.start()
        return thread


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # the terminal may be gone (SIGHUP)
        print(line, file=sys.stderr)


def _in_terminal_foreground() -> bool:
    """True when the launcher is the terminal's foreground group (a Ctrl-C there reaches the job too)."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _copy_stream(source: IO[bytes] | None, terminal: IO[str], log: IO[bytes] | None) -> None:
    if source is None:
        return
    out = getattr(terminal, "buffer", None)
    fd = source.fileno()
    try:
        while chunk := os.read(fd, 1 << 16):
            if out is not None:
                with contextlib.suppress(Exception):
                    out.write(chunk)
                    out.flush()
            if log is not None:
                try:
                    log.write(chunk)
                except OSError:
                    log = None  # disk full: keep showing the output, stop logging it
    finally:
        with contextlib.suppress(OSError):
            source.close()
        if log is not None:
            with contextlib.suppress(OSError):
                log.close()
