"""Whether runs of one shape train faster stacked or one at a time — measured on this host.

:func:`resgd.core.stacked.worth_stacking` is a rule tuned on one CPU (a token and a weight
cap); CPUs sold under one name differ 2x in float64 matmul rate, and the SST-2 L = 6/10 map runs
it keeps single were 1.13-1.57x faster stacked on another host (issue 22). :func:`stacking_pays`
instead times both ways on this host: a stack of :data:`STACK_SIZE` runs and one
:func:`~resgd.core.train.train_gd` run, :data:`STEPS` GD steps each, interleaved :data:`REPEATS`
times (medians of seconds per run-step), on synthetic data of the shape. The answer is cached per
CPU (model name, family, model), torch version, dtype and shape in ``<cache_dir>/``
:data:`CALIBRATION_FILE`, under a lock, so that every process on a host takes the same decision
and measures it once.

The two trainers agree to rounding only, not bit for bit (:mod:`resgd.core.stacked`), so a caller
whose results are cached must put the decision into its cache key.
"""

from __future__ import annotations

import fcntl
import json
import math
import platform
import statistics
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..atomic import write_json
from ..validation import ConfigError
from .model import ModelConfig, init_params
from .stacked import shape_model, train_stacked, worth_stacking
from .train import GDConfig, output_shape, train_gd

CALIBRATION_FILE = "stacking_calibration.json"
STACK_SIZE = 8
"""Runs in the timed stack (the map's stacks hold 13-16; per-run cost is flat beyond ~8)."""
STEPS = 3
REPEATS = 3
MARGIN = 0.9
"""A decision needs one way at least 1/0.9 = 1.11x faster than the other (the noise of interleaved
medians on a shared 2-core machine was ±10 %); in between, :func:`~resgd.core.stacked.worth_stacking`'s
rule decides, so noise neither flips a decision nor moves a shape off today's path."""


def cpu_id() -> str:
    """The CPU's model name with its family/model numbers (virtual machines often show only
    "AMD EPYC" for CPUs 2x apart in float64 matmul rate)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine()
    name = fields.get("model name", platform.processor() or platform.machine())
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


@dataclass(frozen=True)
class Calibration:
    """Seconds per run-step stacked and alone (medians), and the decision they make."""

    stacked_s: float
    single_s: float
    stack_size: int

    @property
    def pays(self) -> bool | None:
        """True: stacked clearly faster; False: clearly slower; None: within :data:`MARGIN`."""
        if self.stacked_s < MARGIN * self.single_s:
            return True
        if self.single_s < MARGIN * self.stacked_s:
            return False
        return None


def calibration_key(cfg: ModelConfig, n_train: int, n_tokens: int, dtype: torch.dtype) -> str:
    """What the decision depends on: the host's CPU, torch, the dtype and the runs' shape."""
    return json.dumps({"cpu": cpu_id(), "torch": torch.__version__, "dtype": str(dtype),
                       "model": asdict(shape_model(cfg)), "n_train": int(n_train), "n_tokens": int(n_tokens)},
                      sort_keys=True)


def measure(cfg: ModelConfig, n_train: int, n_tokens: int, dtype: torch.dtype = torch.float64,
            stack_size: int = STACK_SIZE, steps: int = STEPS, repeats: int = REPEATS) -> Calibration:
    """Time both trainers on synthetic data of this shape (a tiny step size: nothing diverges)."""
    for name, value in (("n_train", n_train), ("n_tokens", n_tokens), ("stack_size", stack_size), ("steps", steps),
                        ("repeats", repeats)):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"calibration.measure: {name}: expected an integer >= 1, got {value!r}")
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n_train, n_tokens, cfg.d, generator=g, dtype=torch.float64).to(dtype)
    Y = torch.randn(*output_shape(cfg, X), generator=g, dtype=torch.float64).to(dtype)
    gd = GDConfig(lr=1e-9, iterations=steps, reduction="mean", record_every=max(steps, 1))
    models = [cfg] * stack_size
    params = [init_params(cfg, seed, dtype=dtype) for seed in range(stack_size)]
    stacked, single = [], []
    run_steps = steps + 1  # steps + the final evaluation
    for _ in range(repeats):  # interleaved: a load change on a shared machine hits both
        start = time.perf_counter()
        train_stacked(params, models, X, Y, [gd] * stack_size)
        stacked.append((time.perf_counter() - start) / (stack_size * run_steps))
        start = time.perf_counter()
        train_gd(params[0], cfg, X, Y, gd)
        single.append((time.perf_counter() - start) / run_steps)
    return Calibration(statistics.median(stacked), statistics.median(single), stack_size)


def stacking_pays(cfg: ModelConfig, n_train: int, n_tokens: int, cache_dir: str | Path,
                  dtype: torch.dtype = torch.float64) -> bool:
    """Whether runs of this shape train faster stacked on this host: measured once (:func:`measure`),
    then read from ``<cache_dir>/calibration file``; a measurement within :data:`MARGIN` falls back
    to :func:`~resgd.core.stacked.worth_stacking`. A damaged file is measured again (a warning)."""
    directory = Path(cache_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CALIBRATION_FILE
    key = calibration_key(cfg, n_train, n_tokens, dtype)
    with open(directory / (CALIBRATION_FILE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process measures; the others wait and read its answer
        table = _read(path)
        entry = table.get(key)
        if entry is None:
            entry = asdict(measure(cfg, n_train, n_tokens, dtype))
            write_json(path, {**table, key: entry})
    pays = Calibration(**entry).pays
    return worth_stacking(cfg, n_train, n_tokens) if pays is None else pays


def _read(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
        for entry in table.values():
            Calibration(**entry)
            if not all(isinstance(entry[k], (int, float)) and math.isfinite(entry[k]) and entry[k] > 0
                       for k in ("stacked_s", "single_s")):
                raise ValueError("a time that is not a positive number")
        return table
    except (ValueError, TypeError, AttributeError) as err:
        warnings.warn(f"{path}: not a stacking calibration ({err}); measuring again", stacklevel=3)
        return {}
