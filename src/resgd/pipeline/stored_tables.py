"""The costly tables of pages 2, 3 and 7 in the results store, one entry per chunk.

Why: those pages compute their tables (the theorem's certificate sweep and regime map, the
collapse chapter's training runs, the claims page's null simulation) in every build, about two
CPU-minutes that CI paid on every run. Each table is cut into chunks that compute independently
(one stack of the certificate sweep, one d_QK of the collapse training, one rule of the null
simulation), so the table is the same whichever chunks come from the store. A chunk is a store
entry of kind ``table``: keyed by its producer, its parameters and the arithmetic (as a run is by
its configuration, data and arithmetic; no code in the key), filed with what computes it again.
``make verify`` checks every chunk's checksum and key and re-executes one chunk of every producer,
drawn with the commit as seed, bit for bit (:mod:`resgd.study_store`).
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd

from . import store
from .cache import hash_key
from .sweep import Task, execute

KIND = "table"
PRODUCERS = {
    "theorem1/sweep": "resgd.theorem1.sweep:sweep_chunk",
    "collapse/training": "resgd.collapse.training:training_chunk",
    "claims/null-rates": "resgd.experiments.claims:null_chunk",
}
"""Producer name → ``module:function`` computing one chunk's table from its parameters (a JSON
object: what the store files, and all the chunk's numbers depend on besides the code)."""


def as_json(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` as JSON gives them back (tuples as lists, NumPy scalars as numbers): a chunk is
    computed from the parameters its record files, so re-executing the record computes the same."""
    def native(value):
        if hasattr(value, "item"):
            return value.item()
        raise TypeError(f"table parameter {value!r} ({type(value).__name__}) is not JSON")

    return json.loads(json.dumps(params, default=native))


def table_key(producer: str, params: dict[str, Any]) -> str:
    """The store key of one chunk (24 hex digits, as every store key)."""
    from ..infra.arithmetic import describe

    _producer(producer)
    return hash_key({"kind": KIND, "producer": producer, "params": params, "arithmetic": describe()})


def description(producer: str, params: dict[str, Any]) -> dict[str, Any]:
    """The store record's description of a chunk: enough to compute it again."""
    return {"kind": KIND, "config": {"producer": producer, "params": params}, "dtype": "float64", "data": "synthetic"}


def _producer(name: str):
    if name not in PRODUCERS:
        raise store.StoreError(f"table producer {name!r} is not one of {sorted(PRODUCERS)}")
    module, function = PRODUCERS[name].split(":")
    return getattr(importlib.import_module(module), function)


def compute(producer: str, params: dict[str, Any]) -> pd.DataFrame:
    """One chunk's table, computed (no store)."""
    return _producer(producer)(params)


def timed(arg: tuple[str, dict[str, Any]]) -> tuple[pd.DataFrame, float]:
    """``(producer, params)`` → the chunk's table and the CPU-seconds it took (a task of the sweep engine)."""
    start = time.process_time()
    frame = compute(*arg)
    return frame, time.process_time() - start


def chunks(producer: str, params: Sequence[dict[str, Any]], *, n_jobs: int = 1,
           scheduler: str | None = None) -> list[pd.DataFrame]:
    """The tables of ``params``' chunks, in order: each read from the results store when it holds
    it, the others computed (on ``n_jobs`` workers or ``scheduler``). While ``make results`` fills
    the store, computed chunks enter it; where the store is required (CI), a missing one is an error."""
    params = [as_json(p) for p in params]  # computed from exactly what the store files
    keys = [table_key(producer, p) for p in params]
    stored = store.active()
    frames: dict[str, pd.DataFrame] = {}
    if stored is not None:
        for key in keys:
            frame = stored.get(key)
            if frame is not None:
                frames[key] = frame
    todo = {key: p for key, p in zip(keys, params) if key not in frames}
    store.check_complete(len(todo), len(keys))
    tasks = [Task(key, timed, (producer, p)) for key, p in todo.items()]
    for key, (frame, cpu_s) in execute(tasks, n_jobs=n_jobs, scheduler=scheduler):
        frames[key] = frame
        if stored is not None and stored.filling is not None:
            stored.put(key, frame, description(producer, todo[key]), cpu_s)
    return [frames[key] for key in keys]


def record_key(record: dict[str, Any]) -> str:
    """The key a stored chunk's record gives today (what ``make verify`` compares with its key)."""
    config = record["config"]
    return table_key(config["producer"], config["params"])


def record_label(record: dict[str, Any]) -> str:
    """A chunk named for a reader: its producer and its first parameters."""
    config = record["config"]
    shown = ", ".join(f"{k}={v}" for k, v in list(config["params"].items())[:3] if not isinstance(v, (list, dict)))
    return f"table {config['producer']}" + (f" ({shown})" if shown else "")
