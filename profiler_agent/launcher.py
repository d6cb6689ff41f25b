"""The zero-code launcher behind ``torchscope run``: create the run, start the job instrumented, mark the end (agent layer).

The launcher never imports torch. It makes the run folder, starts the user's command with
the bootstrap on PYTHONPATH (every Python process of the job arms the agent) -- both from the
light ``job_start.py``, before this module loads on ``torchscope run``'s hot path -- then writes
run.json and opens the gate the job's agent waits behind, copies the job's stdout/stderr to the
terminal and to logs/, keeps the heartbeat fresh, forwards SIGINT/SIGTERM, and finally writes
the status.

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
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .environment import describe_launch, read_rank_info
from .heartbeat import Heartbeat
from .job_start import BOOTSTRAP_DIR as _BOOTSTRAP_DIR
from .job_start import Background, JobProcess, default_run_name, exit_code, run_plain, start_job, wait_for

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
    from .options import AgentOptions
    from .upload import Uploader

__all__ = ["LaunchRequest", "launch", "record_started", "default_run_name", "BOOTSTRAP_DIR"]

BOOTSTRAP_DIR = Path(_BOOTSTRAP_DIR)


@dataclass(frozen=True)
class LaunchRequest:
    """What to run and where to record it."""

    command: tuple[str, ...]
    name: str | None = None
    root: Path | str | None = None  # a local folder, or a store URL (s3://bucket/prefix): spooled and uploaded
    tags: tuple[str, ...] = ()
    notes: str = ""
    group: str | None = None  # replicates of one configuration: run.json "group"
    options: AgentOptions = field(default_factory=lambda: _default_options())


def _default_options() -> AgentOptions:
    # options.py (argparse, dataclasses, json) loads only for a request built here: torchscope
    # run's hot path (cli.run_fast) never needs it.
    from .options import AgentOptions

    return AgentOptions()


# options.STOPPED_MAX_STEPS: run.json "stopped" when --max-steps ended the job (a test keeps them equal).
_STOPPED_MAX_STEPS = "max_steps"


def launch(request: LaunchRequest) -> int:
    """Run the job instrumented and return its exit code. Raises TorchscopeError without a command.

    The job starts as soon as its run folder exists (job_start.py); run.json is written while its
    interpreter starts, and the agent inside waits for it (the gate) before it writes anything.
    """
    if not request.command:
        raise TorchscopeError("no command to run; usage: torchscope run [options] -- python train.py ...")
    store_url = _store_url(request.root)
    # A URL is refused here, before the job starts, when its scheme or backend is missing; a
    # supported one is recorded in the local spool and uploaded by the launcher (upload.py).
    root = spool_root(check_store_url(store_url)) if store_url else layout.resolve_root(request.root)
    name = request.name or default_run_name(request.command)
    now = time.time()
    try:
        run_dir = layout.make_run_folder(root, name, now=now)
    except OSError as e:
        return _unrecordable(root, e, request.command)
    job = start_job(request.command, run_dir, request.options.to_json(), t0=now)
    return record_started(job, Path(run_dir), name=name, now=now, command=request.command, tags=request.tags,
                          notes=request.notes, group=request.group, max_steps=request.options.max_steps,
                          store_url=store_url)


def _unrecordable(root: Path | str, error: OSError, command: tuple[str, ...]) -> int:
    # The job matters more than its record: run it plain.
    print(f"torchscope run: cannot create a run in {root} ({error}); running the command without recording",
          file=sys.stderr)
    return run_plain(command)


def record_started(job: JobProcess, run_dir: Path, *, name: str, now: float, command: tuple[str, ...],
                   tags: tuple[str, ...] = (), notes: str = "", group: str | None = None,
                   max_steps: int | None = None, store_url: str | None = None) -> int:
    """Write the manifest of the run whose folder ``run_dir`` was made at ``now`` and whose job has
    just started, let the job's agent in, and follow the job to its final status."""
    # "group" stays a top-level field that readers keep in Manifest.extra (old runs lack it).
    extra: dict[str, object] = {"group": group} if group else {}
    if store_url:
        from .upload import UPLOAD_FIELD  # the uploader loads only for a store URL

        extra[UPLOAD_FIELD] = {"url": scrub_url(store_url), "state": "uploading", "errors": 0}
    try:
        # git and package versions (~50 ms: subprocesses, importlib.metadata) are filled in beside
        # the job's start-up (_Job.run), not before it: the launcher's cost is every job's cost.
        create_run(run_dir.parent, name, run_id=run_dir.name, now=now,
                   command=list(command), tags=list(tags), notes=notes, extra=extra,
                   world_size=read_rank_info().world_size)
    except Exception as e:  # noqa: BLE001 - the job has started: it runs on, unrecorded
        job.open_gate()  # no run.json: the job's agent stays out
        with contextlib.suppress(OSError):
            run_dir.rmdir()  # the empty folder made for it
        print(f"torchscope run: cannot create a run in {run_dir.parent} ({e}); running the command without "
              "recording", file=sys.stderr)
        try:
            if job.start_error is not None:
                print(f"torchscope run: cannot start {command[0]!r}: {job.start_error}", file=sys.stderr)
                return 127
            return job.wait_unrecorded()
        finally:
            job.restore_handlers()
    job.open_gate()
    shown = f"{scrub_url(store_url).rstrip('/')}/{run_dir.name} (spooled in {run_dir})" if store_url else run_dir
    print(f"torchscope run: recording {shown}", file=sys.stderr)
    return _Job(run_dir, job, command=command, max_steps=max_steps, t0=now, store_url=store_url).run()


def _store_url(root: Path | str | None) -> str | None:
    """The store URL that ``root`` (or $TORCHSCOPE_RUNS when it is None) names, or None for a folder."""
    value = str(root) if root is not None and str(root) != "" else os.environ.get(layout.ROOT_ENV)
    return value if value and not isinstance(root, Path) and is_store_url(value) else None


def _describe_launch(run_dir: Path, pid: int) -> None:
    """Record the job's pid, git state and package versions; the job's own values win where it wrote first."""
    with contextlib.suppress(Exception):
        info = describe_launch()

        def change(m: Manifest) -> Manifest:
            return m.replace(git=m.git or info["git"], versions={**info["versions"], **m.versions},
                             extra={**m.extra, "job_pid": pid})

        update_manifest(run_dir, change)


class _Job:
    """One wrapped command from its start (job_start.py) to final status."""

    def __init__(self, run_dir: Path, job: JobProcess, *, command: tuple[str, ...], max_steps: int | None,
                 t0: float, store_url: str | None = None) -> None:
        self.run_dir = run_dir
        self.store_url = store_url
        self.uploader: Uploader | None = None  # only for a store URL
        self.command = command
        self.max_steps = max_steps
        self.job = job
        self.t0 = t0
        self.job_exit_code: int | None = None  # the job's own code when --max-steps overrode it

    def run(self) -> int:
        status, code = RunStatus.FAILED, 1
        # So that the final status fits even when the job fills the disk. 256 KB written and
        # fsynced (1.5-28 ms on this project's VM disk) beside the job's start, not before it:
        # the job's interpreter takes longer than that to start, and _finish waits for it.
        reserve = Background(reserve_status_space, self.run_dir)
        try:
            proc = self.job.proc
            if proc is None:
                error = self.job.start_error
                print(f"torchscope run: cannot start {self.command[0]!r}: {error}", file=sys.stderr)
                code = 127
                return code
            describe = Background(_describe_launch, self.run_dir, proc.pid)
            heartbeat = Heartbeat(self.run_dir).start()
            if self.store_url:  # a thread of the launcher: the job's process never uploads
                from .upload import Uploader

                self.uploader = Uploader(self.run_dir, self.store_url).start()
            tees = [self._tee(proc.stdout, sys.stdout, layout.STDOUT_LOG),
                    self._tee(proc.stderr, sys.stderr, layout.STDERR_LOG)]
            returncode = wait_for(proc)  # never sleeps through a signal to forward
            # A background process the job left behind may hold the pipes open: do not wait for it.
            deadline = time.monotonic() + 10
            for tee in tees:
                tee.join(timeout=max(0.0, deadline - time.monotonic()))
            heartbeat.stop()
            describe.join(timeout=30)
            code = exit_code(returncode)
            status = self._status(returncode)
            if not self.job.asked_to_stop() and self._stopped_at_max_steps():
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
            self.job.restore_handlers()

    def _status(self, returncode: int) -> RunStatus:
        killed = self.job.status_killed(returncode)
        if killed is None:
            return RunStatus.FINISHED if returncode == 0 else RunStatus.FAILED
        return RunStatus.KILLED if killed else RunStatus.FAILED

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
            if m.extra.get("stopped") == _STOPPED_MAX_STEPS and status is RunStatus.FINISHED:
                why = f" after --max-steps {self.max_steps}"
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

    def _stopped_at_max_steps(self) -> bool:
        if self.max_steps is None:
            return False
        from .runformat.reader import read_manifest

        try:
            return read_manifest(self.run_dir).extra.get("stopped") == _STOPPED_MAX_STEPS
        except Exception:  # noqa: BLE001 - an unreadable manifest: judge by the exit code alone
            return False

    def _tee(self, source: IO[bytes] | None, terminal: IO[str], rel: str) -> Background:
        log: IO[bytes] | None = None
        with contextlib.suppress(OSError):
            (self.run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            log = open(self.run_dir / rel, "ab", buffering=0)  # noqa: SIM115 - closed by the thread
        return Background(_copy_stream, source, terminal, log)


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # the terminal may be gone (SIGHUP)
        print(line, file=sys.stderr)


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
