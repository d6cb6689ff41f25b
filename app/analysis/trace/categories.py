"""Event classes of a trace (kernel, runtime, copy, host op, collective, dataloader) as boolean
masks over its events table, and the categories of the step breakdown (analysis layer, pure)."""
from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from app.analysis.trace.table_memo import last_table

__all__ = [
    "DEVICE_CATEGORIES", "LOOP_CATEGORIES", "LOOP_PHASES", "KERNEL_CATS", "MEMCPY_CATS", "MEMSET_CATS",
    "RUNTIME_CATS", "OP_CATS", "ANNOTATION_CATS", "COMM_OP_NAMES", "cat_in", "name_mask", "is_host_op",
    "is_kernel", "is_device_activity", "is_runtime", "dataloader_mask", "communication_kernel_mask",
    "KNOWN_CATS", "unknown_category_notes",
]

DEVICE_CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")
LOOP_CATEGORIES = ("forward", "backward", "optimizer")
LOOP_PHASES = ("forward", "backward", "optimizer", "dataloader", "other")

# Kineto's on-device kernels: CUDA/ROCm/XPU "kernel"; MTIA's "mtia_ccp_events" (MTIA_CCP_EVENTS,
# an alias of CONCURRENT_KERNEL in libkineto's ActivityType.h).
KERNEL_CATS = frozenset({"kernel", "mtia_ccp_events"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "runtime", "mtia_runtime", "glow_runtime", "xpu_runtime",
                          "privateuse1_runtime"})
OP_CATS = frozenset({"cpu_op", "operator"})
ANNOTATION_CATS = frozenset({"user_annotation", "gpu_user_annotation"})
# Every other category Kineto writes (libkineto ActivityType names) and the trace's own ("Trace",
# flow events): a category outside KNOWN_CATS may be device work of a kind not understood here,
# and analyze says so (unknown_category_notes) instead of counting it as 0 device time silently.
KNOWN_CATS = (KERNEL_CATS | MEMCPY_CATS | MEMSET_CATS | RUNTIME_CATS | OP_CATS | ANNOTATION_CATS | frozenset({
    "external_correlation", "cuda_driver", "cpu_instant_event", "python_function", "python", "overhead",
    "mtia_insight", "mtia_counters", "mtia_workloadd", "cuda_sync", "cuda_event", "cuda_profiler_range",
    "hpu_op", "xpu_driver", "collective_comm", "privateuse1_driver", "trace", "ac2g", "fwdbwd", "async",
    "forward_backward", "gpu_op"}))
# torch-tb-profiler's names of collective ops (trace.py NcclOpNameSet / GlooOpNameSet).
COMM_OP_NAMES = frozenset(f"{lib}:{op}" for lib in ("nccl", "gloo")
                          for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter"))


def cat_in(ev: pd.DataFrame, names: Iterable[str]) -> np.ndarray:
    """Boolean mask: the event's ``cat`` (case-insensitive) is one of ``names``."""
    col = ev["cat"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return np.asarray(col.astype(str).str.lower().isin(set(names)).to_numpy(), dtype=bool)
    # categories as one list (iterating the Index is per element), codes gathered with np.take (~2.5x
    # faster than fancy indexing at 374,000 events); code -1 (missing) takes the trailing False
    cats = np.asarray([str(c).lower() in names for c in col.cat.categories.tolist()] + [False])
    return np.asarray(np.take(cats, col.cat.codes.to_numpy()), dtype=bool)


def name_mask(ev: pd.DataFrame, pred: Callable[[str], object]) -> np.ndarray:
    """Evaluate ``pred(name)`` once per distinct name, not once per event."""
    col = ev["name"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return np.fromiter((bool(pred(str(n))) for n in col), bool, len(col))
    hits = np.asarray([bool(pred(str(c))) for c in col.cat.categories.tolist()] + [False])
    return np.asarray(np.take(hits, col.cat.codes.to_numpy()), dtype=bool)  # as in cat_in


def is_host_op(ev: pd.DataFrame) -> np.ndarray:
    """cpu_op/operator/user_annotation: the host events that hold steps and ops."""
    return cat_in(ev, OP_CATS | {"user_annotation"})


def is_kernel(ev: pd.DataFrame) -> np.ndarray:
    return cat_in(ev, KERNEL_CATS)


def is_device_activity(ev: pd.DataFrame) -> np.ndarray:
    return cat_in(ev, KERNEL_CATS | MEMCPY_CATS | MEMSET_CATS)


def is_runtime(ev: pd.DataFrame) -> np.ndarray:
    return cat_in(ev, RUNTIME_CATS)


def _is_dataloader_name(n: str) -> bool:
    return (n.startswith("enumerate(DataLoader)#") and n.endswith(".__next__")) or n.startswith("enumerate(DataPipe)#")


def dataloader_mask(ev: pd.DataFrame) -> np.ndarray:
    return np.asarray(cat_in(ev, OP_CATS | ANNOTATION_CATS) & name_mask(ev, _is_dataloader_name), dtype=bool)


@last_table  # the step table, the overlap and the collectives each ask (~10 ms each at 374,000 events)
def communication_kernel_mask(ev: pd.DataFrame, by_name: bool = True) -> np.ndarray:
    """Kernels launched by a collective op (tb-profiler's rule), or named nccl*/rccl* (our addition,
    off with ``by_name=False``: newer torch launches collectives from ``record_param_comms``, which
    tb-profiler's name list misses). Read-only: the callers of one table share it (table_memo)."""
    kern = is_kernel(ev)
    comm_ops = cat_in(ev, OP_CATS | ANNOTATION_CATS | {"python"}) & name_mask(ev, COMM_OP_NAMES.__contains__)
    ext = set(ev.loc[comm_ops, "external_id"].dropna().astype(int))
    by_ext = ev["external_id"].isin(ext).to_numpy() if ext else np.zeros(len(ev), bool)
    mask = kern & by_ext if not by_name else kern & (by_ext | name_mask(ev, lambda n: n[:4].lower() in ("nccl", "rccl")))
    mask = np.asarray(mask, dtype=bool)
    mask.flags.writeable = False
    return mask


def unknown_category_notes(ev: pd.DataFrame) -> list[str]:
    """One sentence per event category outside KNOWN_CATS (its count and name, and that its time
    is not counted as device activity); [] when every category is understood."""
    col = ev["cat"]
    if isinstance(col.dtype, pd.CategoricalDtype):  # only the events of an unknown category are turned into text
        odd = np.asarray([_unknown_cat(str(c).lower()) for c in col.cat.categories.tolist()] + [False])
        col = col[np.take(odd, col.cat.codes.to_numpy())]
    cats = col.astype(str).str.lower()
    counts = cats[~cats.isin(KNOWN_CATS) & (cats != "") & (cats != "nan")].value_counts()
    return [f"{int(n):,} events of category {c!r} (a device or activity kind Torchscope does not understand) "
            "are not counted as device time: kernel, copy and device idle figures leave them out"
            for c, n in counts.items()]


def _unknown_cat(lowered: str) -> bool:
    return lowered not in KNOWN_CATS and lowered not in ("", "nan")

