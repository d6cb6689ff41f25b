"""Is a run's recorded process still the one that wrote it? (run-format layer, stdlib only).

``effective_status`` asks this before it trusts a heartbeat: on the run's own host, a recorded
pid that is gone -- or that now belongs to another process, told apart by the process start
time recorded next to it (run.json ``pid_start_ticks``, Linux) -- means the run crashed, at once.
On another host nothing can be checked and the heartbeat alone decides.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

from .schema import Manifest

# The agent refreshes the heartbeat this often; a run is stale after several missed beats. Here,
# not in the reader, so that the launcher's heartbeat thread needs no reader module.
HEARTBEAT_INTERVAL_S = 5.0
HEARTBEAT_STALE_S = 6 * HEARTBEAT_INTERVAL_S

__all__ = ["PID_START_FIELD", "HEARTBEAT_INTERVAL_S", "HEARTBEAT_STALE_S", "pid_alive", "process_start_ticks",
           "recorded_process_gone"]

PID_START_FIELD = "pid_start_ticks"  # run.json: /proc/<pid>/stat start time of ``pid`` (clock ticks since boot)


def process_start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot, or None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        # Field 22, counted after the command name, which is in parentheses and may hold spaces.
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError, ValueError):
        return False
    try:  # a zombie nobody reaped has stopped writing all the same
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def recorded_process_gone(manifest: Manifest) -> bool | None:
    """True when the run's process is known gone, False when known alive, None when it cannot be told.

    Only on the host that recorded the run; a pid reused by a later process counts as gone
    when the start time was recorded.
    """
    pid = manifest.pid
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or manifest.host != platform.node():
        return None
    if not pid_alive(pid):
        return True
    recorded = manifest.extra.get(PID_START_FIELD)
    if isinstance(recorded, int) and not isinstance(recorded, bool):
        now = process_start_ticks(pid)
        if now is not None and now != recorded:
            return True
    return False
