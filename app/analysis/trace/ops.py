"""Operator table: calls, self and total host time, device time per op (analysis layer, pure).

Definitions (the same as ``torch.profiler``'s ``key_averages()``):

- the host events of one thread form a tree by interval containment (sorted by start, longest
  first); ``total_us`` is an event's duration, ``self_us`` its duration minus its direct
  children's (runtime calls such as ``cudaLaunchKernel`` are children too, as in torch);
- ``device_self_us`` is the time of the kernels, memcpys and memsets (linked by correlation id)
  launched by the op's runtime calls: those carrying the op's External id, as torch and
  torch-tb-profiler link them, else (older traces) those directly inside the op;
- ``share`` is ``self_us`` over the summed duration of the trace's steps (every ``ProfilerStep#N``
  of the profiled window, the trailing ones the step table drops included), capped at 1:
  ``self_us`` sums the op's threads, so an op running on several threads at once (gloo's
  ``gloo:all_reduce`` on two worker threads, ``synchronizeStream``) can hold more than the steps'
  wall time; ``threads`` says on how many threads the op ran, and a capped share is one whose
  summed self time reached the steps' duration (front ends say so next to the table);
- when the trace has ``ProfilerStep#N`` steps, host events are cut to the profiled window (first
  step's start to last step's end, trailing steps the step table drops included: a single run's
  op table covers the whole profiled window, as ``key_averages()`` does, while ``diff``'s op deltas
  average the kept steps): only the time inside counts and events wholly outside are not rows. The profiler stops inside the last step's enclosing ranges (a training loop steps it
  from ``optimizer.step``), so an uncut ``Optimizer.step#…`` range counted the profiler's stop
  and trace export (781 ms on the baseline sample). ``key_averages()`` has no such cut; it agrees
  on every event inside the steps;
- ``module`` (``group_by="module"``) is the innermost ``nn.Module`` the op ran in, forward or
  backward (app/analysis/trace/op_modules.py), "" outside every module.
``ProfilerStep#N`` spans, ``nn.Module: …`` ranges and the other ``record_function`` ranges (cat
``user_annotation``: ``## forward ##``, ``Optimizer.step#…``, ``enumerate(DataLoader)#…``,
``DistributedDataParallel.forward``) are tree nodes (they are parents) but not rows of the table,
whatever the grouping: their children's self times do not change. torch-tb-profiler's operator
view leaves them out too (``tb_plugin/torch_tb_profiler/profiler/node.py``, ``is_operator_node``:
only ``cpu_op`` nodes, minus ``Optimizer.…``, DataLoader ``__next__`` and ``DataParallel.forward``
names, which older torch recorded as ``cpu_op`` and which are left out here too; ``op_agg.py``
aggregates those nodes). A range's "self time" is only what its children do not cover, and a
range whose work runs on another thread (``## backward ##`` on the main thread, autograd on its own) is
waiting, which made the table's shares sum past 100% of the steps on GPU traces. Collectives
recorded as annotations (``nccl:*``, ``gloo:*``, ``mpi:*``, ``ucc:*``: c10d's process groups
name their profiler ranges so) stay rows: their time is the collective's launch.
``compute_annotation_table`` gives the ranges, with the same columns.

``torch.profiler``'s ``key_averages()`` lists user annotations as rows; this table equals it
without them (its entries with ``is_user_annotation``, and ``ProfilerStep#N``).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from app.analysis.trace.categories import (
    ANNOTATION_CATS,
    OP_CATS,
    RUNTIME_CATS,
    cat_in,
    is_device_activity,
    is_runtime,
    name_mask,
)
from app.analysis.trace.event_tree import op_tree
from app.analysis.trace.op_modules import MODULE_PREFIX, ModuleScopes, attribute_modules
from app.analysis.trace.step_spans import StepSource, find_steps
from app.data.trace import TraceSet, TraceTables

__all__ = ["OP_COLUMNS", "HOST_CATS", "GROUPINGS", "COMM_ANNOTATION_PREFIXES", "compute_op_table",
           "compute_annotation_table", "compute_op_events", "compute_op_events_with_scopes",
           "is_op_row", "is_annotation_row", "is_user_annotation", "step_total_us", "profiled_window"]

OP_COLUMNS = ["name", "calls", "self_us", "total_us", "device_self_us", "mean_us", "share", "category", "threads"]
HOST_CATS = (OP_CATS | ANNOTATION_CATS | RUNTIME_CATS | {"python", "cuda_driver"}) - {"gpu_user_annotation"}
GROUPINGS = (None, "shape", "module")
# Names c10d's process groups give the profiler ranges of their collectives (ProcessGroupNCCL,
# ProcessGroupGloo, ProcessGroupMPI, ProcessGroupUCC: "<backend>:<collective>"); a superset of
# categories.COMM_OP_NAMES, tb-profiler's list, which misses e.g. nccl:_all_gather_base or nccl:send.
COMM_ANNOTATION_PREFIXES = ("nccl:", "gloo:", "mpi:", "ucc:")
# tb-profiler's ExcludeOpName (node.py)
_EXCLUDED_OP_NAMES = frozenset({"DataParallel.forward", "DistributedDataParallel.forward"})
_GROUP_KEY = {"shape": "input_shapes", "module": "module"}


def compute_op_events(events: pd.DataFrame, *, modules: bool = True) -> pd.DataFrame:
    """Host events with ``parent`` (row position), ``self_us`` and ``device_self_us`` columns, and
    (``modules=True``) ``module``, ``module_path`` and ``phase`` (app/analysis/trace/op_modules.py)."""
    return compute_op_events_with_scopes(events, modules=modules)[0]


def compute_op_events_with_scopes(events: pd.DataFrame, *, modules: bool = True,
                                  window: tuple[float, float] | None = None
                                  ) -> tuple[pd.DataFrame, ModuleScopes | None]:
    """compute_op_events and the ModuleScopes it used (None with ``modules=False``).

    With ``window`` (``profiled_window``: the span of the ProfilerStep#N steps) host events are
    cut to it: ``dur_us`` and ``self_us`` count only the time inside, and the ``inside`` column
    says which events overlap it at all. The profiler stops inside the last step's enclosing
    ranges (the agent's step hook runs inside ``Optimizer.step#…``): without the cut such a range
    counts the profiler's stop and export as its own time."""
    cols = ["name", "cat", "ts_us", "dur_us", "pid", "tid", "correlation", "external_id", "input_shapes"]
    mask = cat_in(events, HOST_CATS)
    host = events.loc[mask, cols].reset_index(drop=True)
    parent = op_tree(host)
    dur = host["dur_us"].to_numpy(float)
    if window is not None:
        lo, hi = window
        start = host["ts_us"].to_numpy(float)
        end = start + dur
        inside = ((start < hi) & (end > lo)) | ((dur == 0) & (start >= lo) & (start <= hi))
        # a clipped child stays inside its clipped parent, so self = clipped − clipped children
        dur = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0, None)
        host = host.assign(dur_us=dur, inside=inside)
    has_parent = parent >= 0
    child_sum = np.bincount(parent[has_parent], weights=dur[has_parent], minlength=len(host))
    self_us = np.clip(dur - child_sum, 0, None)
    device = np.zeros(len(host))
    dmask = is_device_activity(events) & events["correlation"].notna().to_numpy()
    rt_mask = is_runtime(host) & host["correlation"].notna().to_numpy()
    if dmask.any() and rt_mask.any():
        dev_by_corr = pd.Series(events["dur_us"].to_numpy(float)[dmask]).groupby(
            events["correlation"].to_numpy(dtype=np.int64, na_value=-1)[dmask]).sum()
        rt_pos = np.nonzero(rt_mask)[0]
        rt_corr = host["correlation"].to_numpy(dtype=np.int64, na_value=-1)[rt_mask]
        rt_dev = dev_by_corr.reindex(rt_corr).fillna(0.0).to_numpy(float)
        owner = _launching_ops(host, rt_pos, parent)
        ok = owner >= 0
        device += np.bincount(owner[ok], weights=rt_dev[ok], minlength=len(host))
    host = host.assign(parent=parent, self_us=self_us, device_self_us=device)
    if not modules:
        return host, None
    scopes = attribute_modules(events, np.flatnonzero(mask))
    return host.assign(module=scopes.module, module_path=scopes.module_path, phase=scopes.phase), scopes


def _range_name(n: str) -> bool:
    """torch-tb-profiler's ``is_operator_node`` name exclusions (ranges older torch recorded as
    ``cpu_op``), and ``## name ##`` ranges (torch's ``## forward ##``/``## backward ##`` style
    annotations, whatever category a trace gives them)."""
    return (n.startswith("Optimizer.") or n in _EXCLUDED_OP_NAMES
            or (n.startswith("enumerate(DataLoader)#") and n.endswith(".__next__"))
            or (len(n) > 4 and n.startswith("##") and n.endswith("##")))


def is_user_annotation(ev: pd.DataFrame) -> np.ndarray:
    """Events that are ``record_function`` ranges (cat ``user_annotation``/``gpu_user_annotation``,
    or named as tb-profiler's ``is_operator_node`` excludes: ``Optimizer.…``, DataLoader
    ``__next__``, ``(Distributed)DataParallel.forward``) other than collectives (names starting
    with COMM_ANNOTATION_PREFIXES)."""
    ranges = cat_in(ev, ANNOTATION_CATS) | name_mask(ev, _range_name)
    return np.asarray(ranges & ~name_mask(ev, lambda n: n.startswith(COMM_ANNOTATION_PREFIXES)), dtype=bool)


def _step_or_module(ev: pd.DataFrame) -> np.ndarray:
    return name_mask(ev, lambda n: n.startswith(("ProfilerStep#", MODULE_PREFIX)))


def is_op_row(ev: pd.DataFrame) -> np.ndarray:
    """Host events that are rows of the op table: not ``ProfilerStep#N`` spans, not module ranges,
    not user annotations (collectives excepted: see the module docstring)."""
    return np.asarray(~(_step_or_module(ev) | is_user_annotation(ev)), dtype=bool)


def is_annotation_row(ev: pd.DataFrame) -> np.ndarray:
    """Host events that are rows of the annotation table: user annotations other than
    ``ProfilerStep#N`` spans and module ranges."""
    return np.asarray(is_user_annotation(ev) & ~_step_or_module(ev), dtype=bool)


def _launching_ops(host: pd.DataFrame, rt_pos: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """The op each runtime call belongs to: the host op with the call's External id when that op's
    span contains the call (how torch and tb-profiler link them; it also reaches past user
    annotations nested inside the op), else the innermost enclosing event (older traces, whose
    runtime External ids are correlation ids)."""
    # Temporaries of one value per host event are dropped as soon as they are used: this runs at
    # the peak of a cold `analyze` (benchmarks/README.md, issue 13, wave 15).
    ext = host["external_id"].to_numpy(dtype=np.int64, na_value=-1)
    is_op = ~is_runtime(host) & (ext >= 0)
    by_ext = pd.Series(np.nonzero(is_op)[0], index=ext[is_op])
    del is_op
    by_ext = by_ext[~by_ext.index.duplicated()]
    cand = by_ext.reindex(ext[rt_pos]).to_numpy(dtype=float, na_value=np.nan)
    del by_ext, ext
    found = ~np.isnan(cand)
    c = np.where(found, cand, 0).astype(np.int64)
    del cand
    starts = host["ts_us"].to_numpy(float)
    t = starts[rt_pos]
    found &= (starts[c] <= t) & (t <= starts[c] + host["dur_us"].to_numpy(float)[c])  # the op's end
    return np.where(found, c, parent[rt_pos])


def step_total_us(trace: TraceTables) -> float:
    """Summed duration (µs) of the trace's steps (0 without steps)."""
    return _steps_and_window(trace)[0]


def profiled_window(trace: TraceTables) -> tuple[float, float] | None:
    """(first step's host start, last step's host end) when the trace has ``ProfilerStep#N``
    steps, trailing steps the step table drops included, else None (optimizer-step or
    whole-trace steps are no profiling window)."""
    return _steps_and_window(trace)[1]


def _steps_and_window(trace: TraceTables) -> tuple[float, tuple[float, float] | None]:
    """(steps' summed duration, profiled window). The window holds every ProfilerStep#N, the
    trailing ones the step table drops (step_spans rule 3) included, and so does the duration
    (their host time): the op table covers the whole profiled window, as key_averages() does."""
    spans = find_steps(trace.events)
    if not len(spans.start):
        return 0.0, None
    total = float(np.sum(spans.end - spans.start)) + spans.dropped_host_us
    if spans.source != StepSource.PROFILER_STEP:
        return total, None
    return total, spans.profiled_host


def compute_op_table(traces: TraceSet, group_by: str | None = None, *, steps_us: float | None = None) -> pd.DataFrame:
    """Return one row per op name, or per (name, input_shapes) with ``group_by="shape"``, or per
    (name, module) with ``group_by="module"`` (module "" for ops outside every module).

    Columns OP_COLUMNS (+ ``input_shapes`` / ``module``), sorted by ``self_us`` descending;
    several traces (ranks) are summed. User annotations are not rows (module docstring).
    Raises ValueError for another ``group_by``.
    """
    if group_by not in GROUPINGS:
        raise ValueError(f"group_by must be one of None, 'shape', 'module', got {group_by!r}")
    return _aggregate(traces, is_op_row, group_by, steps_us)


def compute_annotation_table(traces: TraceSet, *, steps_us: float | None = None) -> pd.DataFrame:
    """The ``record_function`` ranges the op table leaves out (is_annotation_row), one row per
    name with the op table's columns: ``total_us`` is the ranges' wall time, ``self_us`` what their
    children on the same thread do not cover, ``device_self_us`` the kernels launched directly
    in them, ``share`` = ``self_us`` / steps (without steps: / the ranges' summed self time).
    Sorted by ``self_us`` descending."""
    return _aggregate(traces, is_annotation_row, None, steps_us)


def _aggregate(traces: TraceSet, rows: Callable[[pd.DataFrame], np.ndarray], group_by: str | None, steps_us: float | None) -> pd.DataFrame:
    frames, total_steps, n_threads = [], 0.0, 0
    extra = [_GROUP_KEY[group_by]] if group_by else []
    # only the columns grouped and summed are copied for the kept rows, and the events are freed
    # first: the copy of every column was the peak of a cold `analyze` (benchmarks/README.md, issue 13)
    needed = ["name", *extra, "cat", "dur_us", "self_us", "device_self_us", "pid", "tid"]
    for t in traces:
        total, window = _steps_and_window(t)
        ev, _ = compute_op_events_with_scopes(t.events, modules=group_by == "module", window=window)
        keep = rows(ev) & (ev["inside"].to_numpy() if window is not None else True)
        # a thread is (trace, pid, tid): threads of different ranks are different threads
        kept = ev[needed][keep]
        del ev
        thread, n = _thread_keys(kept, n_threads)
        frames.append(kept.assign(thread=thread))
        n_threads += n
        total_steps += total if steps_us is None else 0.0
    if steps_us is not None:
        total_steps = steps_us
    keys, cols = ["name"] + extra, OP_COLUMNS + extra
    if not frames or not sum(len(f) for f in frames):
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("name", "category", *extra) else float)
                             for c in cols})
    ev = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    # Group on the categorical codes (cheap); only the grouped rows are turned into plain strings.
    g = ev.groupby(keys, sort=False, observed=True).agg(
        calls=("dur_us", "size"), self_us=("self_us", "sum"), total_us=("dur_us", "sum"),
        device_self_us=("device_self_us", "sum"), category=("cat", "first"),
        threads=("thread", "nunique")).reset_index()
    for k in keys + ["category"]:
        g[k] = g[k].astype(str)
    g["mean_us"] = g["total_us"] / g["calls"]
    denom = total_steps if total_steps > 0 else float(g["self_us"].sum()) or 1.0
    g["share"] = (g["self_us"] / denom).clip(upper=1.0)  # summed over threads: capped (module docstring)
    g["calls"] = g["calls"].astype(int)
    g["threads"] = g["threads"].astype(int)
    return g[cols].sort_values(["self_us", "name"], ascending=[False, True], ignore_index=True)


def _text_ids(col: pd.Series) -> tuple[np.ndarray, int]:
    """One id per distinct text of ``col`` as ``astype(str)`` gives it (-1 for a missing value),
    and how many ids: computed on the categories, not on every event."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        words, n = pd.factorize(np.array([str(c) for c in col.cat.categories], dtype=object))
        codes = col.cat.codes.to_numpy()
        return np.where(codes >= 0, words[np.maximum(codes, 0)] if len(words) else -1, -1), len(n)
    ids, uniq = pd.factorize(col.astype(str))
    return np.asarray(ids), len(uniq)


def _thread_keys(ev: pd.DataFrame, offset: int) -> tuple[np.ndarray, int]:
    """Per event a number for its (trace, pid, tid) thread, ``offset`` and up, NaN when its pid or
    tid is missing (not a thread, as the text key "i/pid/tid" was NaN); and how many numbers the
    trace may use. Integer keys instead of one string per event (the op table's cost at 100 MB)."""
    pid, n_pid = _text_ids(ev["pid"])
    tid, n_tid = _text_ids(ev["tid"])
    key = (offset + pid.astype(np.int64) * n_tid + tid).astype(float)
    key[(pid < 0) | (tid < 0)] = np.nan
    return key, n_pid * n_tid

