"""The full study in the results store: computed by ``make results``, proven by ``make verify``.

What the store holds is what the full book's pages compute with gradient descent and cache: every
training run and every L̂ of the Jena and SST-2 pages (their stand-in row included) and of the
claims' map, and the costly tables of pages 2, 3 and 7 in chunks (:mod:`resgd.pipeline.stored_tables`:
the certificate sweep and regime map, the collapse training, the null simulation), all by
:func:`design`, the same calls the pages make. The pages' cheaper numbers are computed in every build.

* :func:`refresh` (``make results``): re-checks the entries already stored (each run's first
  iterations re-executed; stale ones dropped), computes what the design needs and the store lacks
  (resumable: each result is cached as it arrives), keeps exactly the entries the design used, and
  says what changed.
* :func:`verify` (``make verify``, CI): (1) every object's checksum and every key recomputed from its
  recorded configuration, data and arithmetic; (2) every stored run re-executed for its first
  :data:`FIRST_ITERATIONS` iterations; (3) a sample, drawn with the commit as seed, one entry of each
  shape (kind × data set × size × depth; a table chunk of each producer), re-executed to its end. All bit for bit; the report goes to
  ``<results>/verification.json`` for the book's *Reproduce* page.
"""

from __future__ import annotations

import math
import random
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import settings
from .infra import arithmetic
from .dataset_registry import paper
from .infra.atomic import write_json
from .pipeline import store as store_module
from .pipeline import stored_tables
from .pipeline.store import ArithmeticMismatch, Store, StoreError

FIRST_ITERATIONS = 10
"""Iterations of every stored run re-executed by :func:`verify` (a multiple of the runs' record
interval, so the σ columns are compared too; about 1-2 % of the design's GD work). A run under the
theorem's path step is re-executed for its first segment whole (``PATH_EVERY`` iterations), the
span over which its step rule decides."""
REPORT_NAME = "verification.json"


class VerifyFailed(StoreError):
    """The store is not what today's code computes (or is damaged): ``make results`` refreshes it."""


def design(*, n_jobs: int = 2, scheduler: str | None = None, progress: bool = True) -> None:
    """Compute (or read) every result the full book's pages 4, 5 and 6 use, and the costly tables of
    pages 2, 3 and 7, as the pages do."""
    from .experiments import configuration
    from .experiments.study import run_experiments
    from .experiments.sources import STANDIN_ARMS, standin_settings
    from .experiments.pages import twin_table
    from .robustness import study as rb

    engine = {"n_jobs": n_jobs, "scheduler": scheduler, "progress": progress}
    for record in paper():
        s = configuration.settings(record.name, False)
        run_experiments(s, **engine)
        twin_table(s.depth(), n_jobs=n_jobs)  # the twins' L̂ at θ⁰, the He-scaled twin's among them
        if record.standin:
            run_experiments(standin_settings(s), only=STANDIN_ARMS, **engine)
    rb.build_map(False, **engine)
    pages_tables(n_jobs=n_jobs, scheduler=scheduler)


def pages_tables(*, n_jobs: int = 2, scheduler: str | None = None) -> None:
    """The stored tables of pages 2, 3 and 7 (:mod:`resgd.pipeline.stored_tables`), computed as the
    full book's pages compute them."""
    from .collapse import study as collapse
    from .collapse.training import training_tables
    from .experiments.claims import book_null_rates
    from .theorem1 import regime_map, study as theory

    p = theory.preset(False)
    theory.certificate_sweep(p, n_jobs=n_jobs, scheduler=scheduler)
    regime_map.regime_map(p, n_jobs=n_jobs, scheduler=scheduler)  # the book's subset of the map
    training_tables(collapse.preset(False))
    book_null_rates(quick=False)


# ---------------------------------------------------------------------------------------- helpers

def _require_pinned() -> None:
    why = arithmetic.why_not_pinned()
    if why:
        raise ArithmeticMismatch(f"the results store is made and proven under pinned arithmetic only: {why}")


def _store(root: str | Path | None = None) -> Store:
    root = Path(root) if root is not None else settings.store_dir()
    if root is None:
        raise StoreError("no results store: this package does not run from a checkout; set RESGD_STORE_DIR")
    return Store(root)


def _config(record: dict[str, Any]):
    from .experiments.configuration import config_from_dict

    return config_from_dict(record["config"])


def _key(record: dict[str, Any]) -> str:
    from .experiments.configuration import entry_key

    if record["kind"] == stored_tables.KIND:
        return stored_tables.record_key(record)
    return entry_key(_config(record), record["kind"], dtype=record["dtype"])


def _kinds() -> dict[str, Callable]:
    """Entry kind → the function that computes a stack of configurations of that kind (one table each)."""
    from .experiments.steps import PATH_KIND, path_stack
    from .experiments.runs import _run_stack
    from .experiments.steps import _lhat_stack, lhat_kind

    return {"run": _run_stack, lhat_kind(): _lhat_stack, PATH_KIND: path_stack}


def _first_kinds() -> dict[str, Callable]:
    """Run kind → the function that re-executes a stack of runs cut after their first iterations: the
    histories only, the trainer's columns (all that :func:`history_differs` compares), without each
    run's tidy table or a path-step run's L̂ at its end, which cost a short run more than its steps."""
    from .experiments.runs import _history_stack
    from .experiments.steps import PATH_KIND, path_first_segments

    return {"run": _history_stack, PATH_KIND: path_first_segments}


def _execute(jobs: dict[str, tuple[str, Any]], *, n_jobs: int, scheduler: str | None,
             desc: str, progress: bool, fns: dict[str, Callable] | None = None) -> dict[str, pd.DataFrame]:
    """``{key: (kind, config)}`` computed afresh (no cache), stacked as the sweeps stack them, by
    ``fns`` (kind → stack function; default :func:`_kinds`)."""
    from tqdm.std import tqdm

    from .experiments.runs import stack_groups
    from .pipeline.sweep import Task, check_n_jobs, execute_checked

    fns = _kinds() if fns is None else fns
    groups = []
    for kind in sorted({kind for kind, _ in jobs.values()}):
        tasks = [Task(key, None, config) for key, (k, config) in jobs.items() if k == kind]
        groups += stack_groups(tasks, n_jobs=check_n_jobs(n_jobs), fn=fns[kind])
    out = {}
    with tqdm(total=len(jobs), desc=desc, disable=not progress or not jobs, leave=False) as bar:
        for key, value, _ in execute_checked(groups, n_jobs=n_jobs, scheduler=scheduler):
            out[key] = value
            bar.update()
    return out


def _bits(values: np.ndarray) -> np.ndarray:
    values = np.ascontiguousarray(values)
    return values.view(np.int64) if values.dtype == np.float64 else values


def _same(a: pd.Series, b: pd.Series) -> bool:
    x, y = a.to_numpy(), b.to_numpy()
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    return bool(np.array_equal(_bits(x), _bits(y))) if x.dtype.kind in "biuf" else bool((x == y).all())


def history_differs(stored: pd.DataFrame, fresh: pd.DataFrame, rows: int) -> str:
    """Where the first ``rows`` rows of two runs' histories differ in any bit ("" when they do not)."""
    from .core.trainer import ROW_FIELDS

    n = min(rows, len(stored))
    if len(fresh) < n:
        return f"{len(fresh)} rows re-executed where {n} are stored"
    for column in ROW_FIELDS:
        a, b = stored[column].iloc[:n].reset_index(drop=True), fresh[column].iloc[:n].reset_index(drop=True)
        if not _same(a, b):
            t = int(np.flatnonzero(_bits(a.to_numpy()) != _bits(b.to_numpy()))[0])
            return f"{column} at t = {t}: stored {a.iloc[t]!r}, re-executed {b.iloc[t]!r}"
    return ""


def frame_differs(stored: pd.DataFrame, fresh: pd.DataFrame) -> str:
    """Where two whole tables differ in any bit ("" when they do not); the ``engine_*`` columns name
    the host that computed them and are not compared."""
    columns = [c for c in stored.columns if not c.startswith("engine_")]
    if list(fresh.columns) != list(stored.columns):
        return f"columns {list(fresh.columns)} re-executed where {list(stored.columns)} are stored"
    if len(fresh) != len(stored):
        return f"{len(fresh)} rows re-executed where {len(stored)} are stored"
    for column in columns:
        if not _same(stored[column], fresh[column]):
            return f"column {column}"
    return ""


def _label(record: dict[str, Any]) -> str:
    if record["kind"] == stored_tables.KIND:
        return stored_tables.record_label(record)
    c = record["config"]
    model, gd = c["model"], c["gd"]
    return (f"{record['kind']} {c['dataset']['name']} N={c['dataset']['n_train']} L={model['n_layers']} "
            f"β={model['beta']:g} seed={c['seed']} μ={gd['lr']:.4g} T={gd['iterations']}")


def _stratum(record: dict[str, Any]) -> tuple:
    if record["kind"] == stored_tables.KIND:  # a page's table: one chunk of each producer
        return (record["kind"], record["config"]["producer"])
    c = record["config"]
    return (record["kind"], c["dataset"]["name"], c["dataset"]["n_train"], c["model"]["n_layers"], record["dtype"])


def commit_seed(root: Path) -> str:
    """The checkout's commit (the sample's seed), or "unversioned"."""
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unversioned"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unversioned"


def sample(st: Store, seed: str) -> list[str]:
    """One entry of every stratum (kind × data set × N × depth × dtype), drawn with ``seed``."""
    strata: dict[tuple, list[str]] = {}
    for key in sorted(st.entries):
        strata.setdefault(_stratum(st.entries[key]), []).append(key)
    rng = random.Random(seed)
    return [rng.choice(strata[s]) for s in sorted(strata, key=repr)]


def _cpu_seconds() -> float:
    """CPU-seconds of this process and its live descendants (the worker pool)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


# ---------------------------------------------------------------------------------------- checks

def check_keys(st: Store, keys: Iterable[str]) -> dict[str, str]:
    """Entries whose key is not the one their recorded configuration, data and arithmetic give now
    (relabelled, or data loaded differently on this host): key → problem."""
    problems = {}
    for key in keys:
        record = st.entries[key]
        try:
            again = _key(record)
        except Exception as exc:  # noqa: BLE001 - any failure to rebuild the key is the entry's problem
            problems[key] = f"its configuration cannot be rebuilt ({type(exc).__name__}: {exc})"
            continue
        if again != key and record["kind"] == stored_tables.KIND:
            problems[key] = f"filed under {key} but its producer, parameters and arithmetic give {again} ({_label(record)})"
        elif again != key:
            from .data.spec import data_fingerprint

            config = _config(record)
            here = data_fingerprint(config.dataset, record["dtype"])
            problems[key] = (f"filed under {key} but its configuration, data and arithmetic give {again} "
                             f"({_label(record)})" if here == record["data"] else
                             f"data set {config.dataset.name!r} loads here with fingerprint {here} where the store "
                             f"recorded {record['data']} (other data files, or this host prepares them differently)")
    return problems


def check_first_iterations(st: Store, keys: Iterable[str], *, n_jobs: int, scheduler: str | None = None,
                           progress: bool = True, stored: dict[str, pd.DataFrame] | None = None) -> dict[str, str]:
    """Runs whose first :data:`FIRST_ITERATIONS` iterations (a path-step run: its first segment),
    re-executed, differ from the stored ones. ``stored``: their tables as already read and checked
    (at least the :data:`resgd.core.trainer.ROW_FIELDS` columns), so a store is read once; default: read here."""
    from .experiments.steps import PATH_EVERY, PATH_KIND

    jobs, rows = {}, {}
    for key in keys:
        record = st.entries[key]
        if record["kind"] not in ("run", PATH_KIND):
            continue
        config = _config(record)
        every = config.gd.record_every
        k = min(config.gd.iterations, every * max(1, math.ceil(FIRST_ITERATIONS / every)))
        if record["kind"] == PATH_KIND:  # its first segment whole: the step rule decides on a whole segment
            k = min(config.gd.iterations, PATH_EVERY)
        jobs[key] = (record["kind"], replace(config, gd=replace(config.gd, iterations=k), test_metrics=False))
        rows[key] = k + 1
    fresh = _execute(jobs, n_jobs=n_jobs, scheduler=scheduler, desc="first iterations", progress=progress,
                     fns=_first_kinds())
    problems = {}
    for key in jobs:
        where = history_differs(stored[key] if stored is not None else st.get(key), fresh[key], rows[key])
        if where:
            problems[key] = f"{_label(st.entries[key])}: {where}"
    return problems


def check_whole(st: Store, keys: Iterable[str], *, n_jobs: int, scheduler: str | None = None,
                progress: bool = True, stored: dict[str, pd.DataFrame] | None = None) -> dict[str, str]:
    """Entries that, re-executed to their end, differ from the stored ones in any bit (``stored``:
    their tables as already read and checked; default: read here)."""
    from .pipeline.sweep import Task, execute

    keys = list(keys)
    tables = {k for k in keys if st.entries[k]["kind"] == stored_tables.KIND}
    jobs = {key: (st.entries[key]["kind"], _config(st.entries[key])) for key in keys if key not in tables}
    fresh = _execute(jobs, n_jobs=n_jobs, scheduler=scheduler, desc="sample to the end", progress=progress)
    chunks = [Task(key, stored_tables.timed, (st.entries[key]["config"]["producer"], st.entries[key]["config"]["params"]))
              for key in sorted(tables)]
    for key, (frame, _cpu) in execute(chunks, n_jobs=n_jobs, scheduler=scheduler):
        fresh[key] = frame
    problems = {}
    for key in keys:
        where = frame_differs(stored[key] if stored is not None else st.get(key), fresh[key])
        if where:
            problems[key] = f"{_label(st.entries[key])}: {where}"
    return problems


# ---------------------------------------------------------------------------------------- commands

def verify(root: str | Path | None = None, *, n_jobs: int = 2, scheduler: str | None = None, seed: str | None = None,
           report_dir: str | Path | None = None, progress: bool = True, out: Callable[[str], None] = print) -> dict:
    """Prove the store (module docstring); raises :class:`VerifyFailed` naming how many entries fail."""
    _require_pinned()
    st = _store(root)
    if not st.entries:
        raise VerifyFailed(f"the results store {st.root} is empty or missing: run `make results`")
    start, cpu0 = time.perf_counter(), _cpu_seconds()
    commit = commit_seed(st.root.parent)
    seed = seed or commit
    from .core.trainer import ROW_FIELDS
    from .experiments.steps import PATH_KIND

    failures: dict[str, dict[str, str]] = {}
    drawn = sample(st, seed)
    whole = set(drawn)
    damaged, kept = {}, {}  # each object read and checked once; what the later checks compare kept
    for key in st.entries:
        try:
            frame = st.get(key)
        except StoreError as exc:
            damaged[key] = str(exc)
            continue
        if key in whole:
            kept[key] = frame
        elif st.entries[key]["kind"] in ("run", PATH_KIND):
            kept[key] = frame[[c for c in ROW_FIELDS if c in frame.columns]]
    failures["checksum"] = damaged
    sound = [k for k in st.entries if k not in damaged]
    failures["key"] = check_keys(st, sound)
    sound = [k for k in sound if k not in failures["key"]]
    failures["first iterations"] = check_first_iterations(st, sound, n_jobs=n_jobs, scheduler=scheduler,
                                                          progress=progress, stored=kept)
    failures["sample"] = check_whole(st, [k for k in drawn if k in sound], n_jobs=n_jobs, scheduler=scheduler,
                                     progress=progress, stored=kept)
    runs = sum(st.entries[k]["kind"] == "run" for k in st.entries)
    stored_cpu = sum(r.get("cpu_s") or 0.0 for r in st.entries.values())
    sample_cpu = sum(st.entries[k].get("cpu_s") or 0.0 for k in drawn)
    report = {
        "manifest_sha256": st.digest(), "commit": commit, "entries": len(st.entries), "runs": runs,
        "first_iterations": FIRST_ITERATIONS, "sample_seed": seed, "sample": [_label(st.entries[k]) for k in drawn],
        "sample_share_of_store_cpu": sample_cpu / stored_cpu if stored_cpu else None,
        "store_cpu_s": stored_cpu, "cpu_s": _cpu_seconds() - cpu0, "wall_s": time.perf_counter() - start,
        "arithmetic": arithmetic.describe(), "cpu": _cpu_name(),
        "failures": {check: len(found) for check, found in failures.items()},
        "ok": not any(failures.values()),
    }
    folder = Path(report_dir) if report_dir is not None else settings.results_dir()
    write_json(folder / REPORT_NAME, report)
    out(f"verify: {len(st.entries)} entries, checksums and keys checked; {runs} runs re-executed for their first "
        f"{FIRST_ITERATIONS} iterations; {len(drawn)} entries (one per shape, seed {seed[:12]}) re-executed to their end; "
        f"{report['cpu_s']:.0f} CPU-s, {report['wall_s']:.0f} s")
    bad = {k for found in failures.values() for k in found}
    if bad:
        for check, found in failures.items():
            for key, problem in list(found.items())[:5]:
                out(f"verify: {check}: {problem}")
        counts = ", ".join(f"{len(found)} by {check}" for check, found in failures.items() if found)
        raise VerifyFailed(f"{len(bad)} of {len(st.entries)} stored entries are not what this code computes ({counts}): "
                           f"run `make results` and commit store/")
    return report


def refresh(root: str | Path | None = None, *, n_jobs: int = 2, scheduler: str | None = None, recheck: bool = True,
            progress: bool = True, out: Callable[[str], None] = print, compute: Callable[..., None] = design) -> dict:
    """``make results``: bring the store to what today's code computes for ``compute`` (default: the
    book's :func:`design`); returns the counts."""
    from .experiments.configuration import key_description

    _require_pinned()
    st = _store(root)
    old = {k: r["sha256"] for k, r in st.entries.items()}
    start, cpu0 = time.perf_counter(), _cpu_seconds()
    stale: dict[str, str] = {}
    if recheck and st.entries:
        stale.update(check_keys(st, list(st.entries)))
        stale.update(check_first_iterations(st, [k for k in st.entries if k not in stale], n_jobs=n_jobs,
                                            scheduler=scheduler, progress=progress))
        for key in stale:
            del st.entries[key]
    recheck_cpu = _cpu_seconds() - cpu0
    st.filling, st.used = key_description, set()
    store_module.use(st)
    cpu1 = _cpu_seconds()
    try:
        compute(n_jobs=n_jobs, scheduler=scheduler, progress=progress)
    finally:
        store_module.use(None)
        st.filling = None
    design_cpu = _cpu_seconds() - cpu1
    removed = sorted(set(st.entries) - st.used)
    for key in removed:
        del st.entries[key]
    st.save(arithmetic.describe())
    for path in st.unreferenced_objects():
        path.unlink()
    for folder in (st.root / "objects").glob("*"):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    added = sorted(set(st.entries) - set(old))
    moved = sorted(k for k in st.entries if k in old and old[k] != st.entries[k]["sha256"])
    gone = sorted(set(old) - set(st.entries))
    counts = {"entries": len(st.entries), "added": len(added), "removed": len(gone), "moved": len(moved),
              "stale": len(stale), "recheck_cpu_s": recheck_cpu, "design_cpu_s": design_cpu,
              "wall_s": time.perf_counter() - start}
    out(f"results: {len(st.entries)} entries in {st.root}: {len(added)} added, {len(gone)} removed, "
        f"{len(moved)} with numbers that moved ({len(stale)} found stale by re-execution); "
        f"{recheck_cpu + design_cpu:.0f} CPU-s, {counts['wall_s']:.0f} s")
    for key, problem in list(stale.items())[:5]:
        out(f"results: stale: {problem}")
    return counts


def _cpu_name() -> str:
    from .core.engine import cpu_id

    return cpu_id()
