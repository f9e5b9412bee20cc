"""How the suite shares two cores: pytest-xdist workers (``-n 2 --dist loadgroup`` in pyproject.toml).

Two rules, both applied at collection and neither changing what a test checks:

* A test that uses an expensive set-up shared by its module (a module-scoped fixture of its file:
  a LocalCluster, a JupyterLab server, a Chromium, the PDF's text, a toy build) runs on the same
  worker as the module's other tests, so that set-up is made once, as without xdist
  (``xdist_group`` named after the file). Every other test goes to whichever worker is free.
* The slowest tests and groups are handed out first (:data:`SLOW_FIRST`), so that the run does not
  end with one worker busy on a long test while the other idles. This list is only a scheduling hint:
  a stale entry costs time, never a result.

Each worker computes with its share of the cores (torch's threads: cores / workers), as two
processes with two threads each on two cores spend much of their time spinning in OpenMP's waits.
Each test starts with empty fastgrad buffers (:func:`resgd.fastgrad.workspace.clear_workspace`),
so a test sees the same state whichever tests ran before it in that worker.

Tests that write anything do it under ``tmp_path`` or their own results folder (``results/`` of the
repository: the robustness agreement test only, whose cache entries are locked per entry), so two
workers never write the same file.
"""

from __future__ import annotations

import os

import pytest

SLOW_FIRST = (
    "test_robustness_agreement.py",  # the quick robustness map: about a minute on two cores when not cached
    "test_dask_backend.py",  # a LocalCluster, workers killed and restarted
    "test_lab.py",  # a JupyterLab server running notebooks/01_setup.md, and a Chromium
    "test_book_build.py::test_failing_notebook_is_named_with_its_cell",  # papermill kernels, timeouts
    "test_book_build.py::test_a_failed_notebook_leaves_no_ipynb_in_notebooks",
    "test_book_build.py::test_timeout_kills_the_notebook",
    "test_pipeline.py::test_two_runs_on_one_results_folder_compute_each_run_once",
    "test_browser.py",
    "test_pdf.py",
    "test_dtype_check.py",
    "test_collapse.py::test_figures_from_small_tables",
)


def _shared_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture defined in its own file with a scope wider than the test."""
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(d.scope != "function" and d.baseid == module
               for defs in info.name2fixturedefs.values() for d in defs)


def _rank(item: pytest.Item) -> int:
    """The position of ``item``'s first matching entry in :data:`SLOW_FIRST` (the rest after them)."""
    name = item.nodeid.split("/")[-1]
    for rank, entry in enumerate(SLOW_FIRST):
        if name == entry or name.startswith(entry + "::") or name.startswith(entry + "["):
            return rank
    return len(SLOW_FIRST)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _shared_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    items.sort(key=_rank)  # stable: the order of the files and of their tests is kept otherwise


def pytest_configure(config: pytest.Config) -> None:
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")  # set in each xdist worker
    if workers:
        import torch

        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(workers)))


@pytest.fixture(autouse=True)
def _fresh_fastgrad_buffers():
    """Buffers left by earlier tests in this process are not part of any test's set-up."""
    from resgd.fastgrad.workspace import clear_workspace

    clear_workspace()
    yield
