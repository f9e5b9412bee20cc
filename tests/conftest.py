"""How the suite shares two cores: pytest-xdist workers (``-n 2 --dist loadscope`` in pyproject.toml).

* Each test file runs on one worker (``loadscope``), so a set-up that its tests share (a
  module-scoped fixture: a LocalCluster, a JupyterLab server, a Chromium, the PDF's text, a toy
  build) is made once, as without xdist. (``--dist loadgroup`` would spread a file's other tests
  too, but its ``xdist_group`` marks have no effect with pytest 9.2: xdist 3.8 renames the test
  ids through an attribute that pytest no longer reads.)
* The slowest files are handed out first (:data:`SLOW_FIRST`), so that the run does not end with
  one worker busy on a long file while the other idles. The list is only a scheduling hint: a
  stale entry costs time, never a result.
* Each worker computes with its share of the cores (torch's threads: cores / workers), as two
  processes with two threads each on two cores spend much of their time spinning in OpenMP's waits.
* The trainer's per-thread buffers are *not* emptied between tests: a process that trains several
  models reuses them, and tests running in varied orders on two workers are how a buffer key that
  misses a shape-deciding setting would be found.

Tests that write anything do it under ``tmp_path`` (the build's ``results/`` is only read), so two workers never
write the same file; every test's ``$RESGD_FIGURES_DIR`` and ``$RESGD_RESULTS_DIR`` are folders of its own, and
the run fails when the repository's ``figures/``, ``results/``, ``_build/`` or store changed (``output_guard.py``).
"""

from __future__ import annotations

import resgd  # noqa: F401, I001 - first: pins the arithmetic before torch or numpy load (resgd.infra.arithmetic)

import os

import pytest

pytest_plugins = [
    "pytester",  # test_fault_catalogue.py collects the suite's node ids in this process
    "shared_fixtures",  # fixtures that several test files use
    "output_guard",  # no test writes into, or reads the mode of, the user's own output folders
]

FILE_SECONDS = {  # each file's summed test time (s): a full run's junit (site built; family 6 model 167, two cores), less the cuts measured per file since
    "test_figure_legibility.py": 75,  # every figure of the book drawn and measured; the toy experiments once
    "test_dask_processes.py": 78,  # real dask scheduler and worker processes, killed and stopped
    "test_newcomer.py": 75,  # a one-page quick book built in a copy of the repository, the tests that read it beside it
    "test_book_build.py": 74,  # papermill kernels, two notebook timeouts
    "test_local_backend.py": 56,  # SIGHUP to a sweep's process group, worker pools killed and stopped, sweeps killed
    "test_browser.py": 50,  # every page in Chromium at two widths: tables, equations, images
    "test_dask_backend.py": 45,  # a LocalCluster, workers killed and restarted, one over its memory limit
    "test_identity.py": 40,  # a real dask worker of another version; LocalClusters of other code and other data
    "test_book_outputs.py": 40,  # book builds faulted at every step, two at once, real kernels
    "test_site.py": 30,
    "test_reproduce_publish.py": 29,  # a publish faulted at every step, in forked processes
    "test_experiments.py": 27,
    "test_reproduce.py": 27,  # python -m resgd reproduce killed and resumed, as another user, under a file-size limit
    "test_benchmarks.py": 26,
    "test_lab.py": 25,  # a JupyterLab server running notebooks/01_setup.md, and a Chromium
    "test_store.py": 23,
    "test_collapse.py": 22,
    "test_cache_keys.py": 21,  # each computing module edited, its keys computed again
    "test_pdf.py": 20,
    "test_cli.py": 19,  # python -m resgd in subprocesses, stopped by signals
    "test_stack_identity.py": 14,
    "test_results_cache.py": 13,  # locks of stopped and killed runs, entries read as another user
    "test_dtype_check.py": 12,
    "test_sweep.py": 11,  # two sweeps in subprocesses on one results folder
    "test_theory.py": 10,
    "test_notebook_run.py": 9,
    "test_study.py": 9,
    "test_output_guard.py": 7,  # pytest in subprocesses, one with two workers
    "test_claims.py": 6,  # with a built site; without one, the rules' null simulation (800 sets) takes minutes
}
"""What :data:`SLOW_FIRST` is sorted by. ``--dist loadscope`` sends each file whole to one worker; handing the
longest files out first lets the two workers finish together (the greedy longest-first schedule)."""

SLOW_FIRST = tuple(sorted(FILE_SECONDS, key=FILE_SECONDS.__getitem__, reverse=True))


def _rank(item: pytest.Item) -> int:
    """The position of ``item``'s file in :data:`SLOW_FIRST` (the other files after them)."""
    name = item.nodeid.split("::", 1)[0].split("/")[-1]
    return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)


@pytest.hookimpl(tryfirst=True)  # before xdist's worker sends its collection to the scheduler
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: the order of the other files and of each file's tests is kept


def pytest_configure(config: pytest.Config) -> None:
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")  # set in each xdist worker
    if workers:
        import torch

        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(workers)))
