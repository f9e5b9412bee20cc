"""The isolated-GEMM ceiling of a training step: its own matrix products, captured and replayed alone.

Shared by ``bench_map.py`` (the stacked trainer on the map's shapes) and ``book_floor.py`` (the
single-run trainer on the experiment pages' shapes). A step's GEMM calls (``mm``, ``addmm``,
``bmm``, ``baddbmm`` and their in-place forms) are recorded with copies of their very tensors —
same shapes, strides (transposed views stay views) and ``out=`` buffers — and replayed
:data:`HOT` times each, back to back, with nothing between them: the rate the step's products
reach when their operands sit in cache and no other work competes. No implementation that calls
these kernels on these layouts can spend less time in them. :func:`interleaved` times the replay
beside the step it bounds, so that the two share the machine's load. :func:`profiled`
splits the step's own time: how long its GEMMs take *inside* the step (profiled), so that the gap
between step and ceiling divides into work outside the products and products slower than alone.
"""

from __future__ import annotations

import time

import pandas as pd
import torch
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile

GEMM_NAMES = ("mm", "addmm", "addmm_", "bmm", "baddbmm", "baddbmm_")

HOT = 4
"""How many times in a row :func:`replay` runs each GEMM call (all but the first find it in cache)."""


class CaptureGemms(TorchFunctionMode):
    """Records every GEMM call made inside the ``with`` block with copies of its tensors (see the
    module doc); the calls themselves run as usual."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in GEMM_NAMES:
            self.calls.append((func, [_copy(a) for a in args], {k: _copy(v) for k, v in kwargs.items()}))
        return func(*args, **kwargs)


def _copy(value):
    """A tensor with ``value``'s size, strides and numbers in memory of its own (expanded tensors,
    whose stride-0 axes cannot be written, become contiguous); anything else as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    if 0 in value.stride():
        return value.clone()
    return torch.empty_strided(value.size(), value.stride(), dtype=value.dtype).copy_(value)


def gemm_flops(calls) -> float:
    """2·(batch·m·k)·n summed over the calls (the two factors are the last two tensor arguments;
    2-D factors are a batch of one)."""
    total = 0.0
    for _, args, _ in calls:
        a, b = [t for t in args if isinstance(t, torch.Tensor)][-2:]
        total += 2.0 * a.numel() * b.shape[-1]
    return total


def replay(calls):
    """The ceiling: each captured call run :data:`HOT` times in a row, call after call, nothing else
    between (a call without ``out=`` allocates, as it did in the step). The returned function's
    time divided by ``HOT`` is what the captured products cost alone."""
    def run():
        for func, args, kwargs in calls:
            for _ in range(HOT):
                func(*args, **kwargs)
    return run


def is_gemm(operator: str) -> bool:
    """Whether a profiler key (``aten::mm``, …) names one of :data:`GEMM_NAMES`."""
    return operator.removeprefix("aten::") in GEMM_NAMES


def profiled(fn):
    """(``run``, ``profiles``): each call of ``run`` calls ``fn`` under ``torch.profiler`` and appends
    ``{operator: (calls, self CPU seconds)}`` to ``profiles``. Put ``run`` into :func:`interleaved`
    beside ``fn`` itself and divide repeat by repeat (:func:`gemm_seconds`): the GEMMs as they run
    in the step, with the step's other work evicting their operands between them. The profiler's
    own overhead (a few µs per operator call) falls outside the GEMMs, and both times see the same load."""
    profiles = []

    def run():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        profiles.append({e.key: (e.count, e.self_cpu_time_total / 1e6) for e in prof.key_averages()})
    return run, profiles


def gemm_seconds(operators: dict) -> float:
    """Self CPU seconds of one :func:`profiled` call inside :data:`GEMM_NAMES` kernels."""
    return sum(seconds for key, (_, seconds) in operators.items() if is_gemm(key))


def operator_breakdown(operators: dict, calls_of_step: int) -> pd.DataFrame:
    """Where one step's time goes, operator by operator, from one :func:`profiled` call that made
    ``calls_of_step`` steps: calls and self milliseconds per step, GEMMs flagged, largest first. The
    profiler's overhead inflates the many small operators; read it as a map, not as a timing."""
    rows = [{"operator": key, "gemm": is_gemm(key), "calls_per_step": calls / calls_of_step,
             "self_ms_per_step": 1e3 * seconds / calls_of_step} for key, (calls, seconds) in operators.items()]
    return pd.DataFrame(rows).sort_values("self_ms_per_step", ascending=False, ignore_index=True)


def interleaved(fns: dict, repeats: int) -> tuple[dict, dict]:
    """(wall, process CPU) seconds of each of ``fns`` per repeat, after one warm-up call each: the
    functions run one after another within a repeat, so a load change on a shared machine hits all
    of them alike and a ratio taken per repeat divides it out."""
    for fn in fns.values():
        fn()
    wall = {name: [] for name in fns}
    cpu = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w, c = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - w)
            cpu[name].append(time.process_time() - c)
    return wall, cpu
