"""``--max-steps N``: end the job cleanly after its N-th optimizer step (agent layer).

The N-th step's hook flushes the metrics, marks the run ``"stopped": "max_steps"`` and raises
``SystemExit(0)``, so ``finally:`` blocks and exit handlers run as for ``sys.exit(0)``. A job
whose non-daemon threads never end would keep Python from exiting: after a grace period a
daemon thread flushes the session and leaves with ``os._exit(0)``.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from .failures import FailureLog
from .metrics import MetricsLog
from .options import STOPPED_MAX_STEPS
from .runformat import Manifest, update_manifest

__all__ = ["MAX_STEPS_GRACE_S", "stop_job"]

MAX_STEPS_GRACE_S = 120.0  # how long the job may take to exit after its N-th step


def stop_job(run_dir: Path, metrics: MetricsLog, failures: FailureLog, limit: int | None,
             close: Callable[[], None]) -> NoReturn:
    """Flush, mark the run, and end the job as a clean ``sys.exit(0)`` would. Raises SystemExit(0)."""
    with failures.guard("max steps"):
        metrics.flush()

        def change(m: Manifest) -> Manifest:
            return m.replace(extra={**m.extra, "stopped": STOPPED_MAX_STEPS})

        update_manifest(run_dir, change)
    print(f"torchscope agent: --max-steps {limit} reached; ending the job", file=sys.stderr)
    # Python waits for non-daemon threads before its exit handlers run: a job whose threads
    # never end would hang here. After a grace period, flush and leave with code 0.
    threading.Thread(target=_exit_after, args=(MAX_STEPS_GRACE_S, failures, close), name="torchscope-max-steps",
                     daemon=True).start()
    raise SystemExit(0)


def _exit_after(seconds: float, failures: FailureLog, close: Callable[[], None]) -> None:
    time.sleep(seconds)
    print(f"torchscope agent: the job did not exit within {seconds:.0f} s of --max-steps; ending it",
          file=sys.stderr)
    with failures.guard("max steps exit"):
        close()
    os._exit(0)
