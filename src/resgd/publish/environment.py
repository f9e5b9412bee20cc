"""The mode (quick or full) and the environment the book's notebooks execute in, in one place for
the book build (:mod:`resgd.publish.build`), JupyterLab (:mod:`resgd.publish.lab`) and the
notebooks themselves (:func:`notebook_quick`, their ``quick`` parameter).

Why a module of its own: a notebook must compute the same thing whether the build or a reader runs
it, so the rule for the mode, the output folders, the inline figure backend and the kernels'
thread settings are defined once, apart from how the build schedules and runs notebooks.

The quick/full setting comes from one place: ``--mode`` if given, else the environment
variable ``RESGD_MODE``, else ``"full"``. The notebooks' processes see ``RESGD_MODE`` (resolved)
and ``RESGD_FIGURES_DIR`` (the repository's ``figures/``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

from .. import settings
from ..infra.arithmetic import pin
from ..infra.mkl_path import child_env

MODES = settings.MODES
MODE_ENV = "RESGD_MODE"
DEFAULT_MODE = "full"
# Figures glued by myst-nb must be rich (image/png) outputs: a non-inline backend set in the
# caller's environment (e.g. MPLBACKEND=Agg on CI) would turn every glued figure into text.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
KERNEL_THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""The thread settings of the notebooks' kernels (:func:`notebook_env`): one intra-op thread each."""


def resolve_mode(flag: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The build's mode: ``flag``, else ``$RESGD_MODE``, else ``full`` (the rule of :func:`resgd.settings.mode`)."""
    return settings.mode(flag, environ=environ)


def notebook_quick(environ: Mapping[str, str] | None = None) -> bool:
    """The notebooks' ``quick`` parameter: the same rule as :func:`resolve_mode`, for a notebook
    (``interactive``: unset ``$RESGD_MODE`` means quick in a session opened by hand).

    The book build sets ``RESGD_MODE`` for every notebook, so what it publishes follows the build's
    mode. Reading the mode here instead of injecting it with papermill keeps each executed
    notebook's cells identical to its ``.md`` source (papermill's ``-p quick False`` still overrides it).
    """
    return settings.mode(interactive=True, environ=environ) == "quick"


def notebook_jobs(n_jobs: int | None, quick: bool) -> int:
    """The notebooks' ``n_jobs`` parameter resolved: a number as given, else 1 in quick mode and 2 in full.

    Why 1 in quick mode: the book runs two notebooks at a time on two cores, and a quick notebook's
    tiny runs cost less than worker processes; two workers beside the other notebook's kernel are
    three busy processes on two cores. It is resolved after the parameters cell, so that a
    papermill ``-p quick`` decides it."""
    return (1 if quick else 2) if n_jobs is None else n_jobs


def notebook_env(root: Path, mode: str | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the notebooks execute in (the book build's, and JupyterLab's: :mod:`resgd.publish.lab`).

    ``mode=None`` leaves ``RESGD_MODE`` as ``base`` has it (a reader's session: quick unless set).
    """
    env = dict(os.environ if base is None else base)
    settings.absolute_paths(env)  # the kernels run in notebooks/: a relative folder would point there
    if mode is not None:
        env[MODE_ENV] = mode
    env["RESGD_FIGURES_DIR"] = str(root / "figures")
    # The results cache and the verdicts live at the repository root (the notebooks run in notebooks/).
    env.setdefault("RESGD_RESULTS_DIR", str(root / "results"))
    env["MPLBACKEND"] = INLINE_BACKEND
    # One intra-op thread in every kernel (and the workers it starts): notebooks run two at a time,
    # each with its own worker pool, and a kernel's second OpenMP thread only spins against them
    # (the twin tables' L̂ took 3-5x its CPU time in wall time at two threads under that load).
    env.update(KERNEL_THREADS)
    # The interpreter's scripts (jupytext, resgd, ...) first on PATH, as in an activated venv.
    bindir = str(Path(sys.executable).parent)
    if env.get("PATH", "").split(os.pathsep)[0] != bindir:
        env["PATH"] = os.pathsep.join(p for p in (bindir, env.get("PATH", "")) if p)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # quiets debugpy in the kernel
    pin(env)  # the kernels compute with the store's arithmetic, whatever they import first
    return child_env(env)  # opt-in $RESGD_MKL_INTEL_PATH: the kernels (and their workers) preload the stub


def claim_outputs(env: Mapping[str, str], mode: str) -> None:
    """Stamp the notebooks' figures folder with ``mode`` (a build of the other mode would overwrite its
    figures, whose names carry no mode: refused, :mod:`resgd.infra.mode_stamp`)."""
    from ..infra.mode_stamp import claim

    claim(env["RESGD_FIGURES_DIR"], mode, how_to_move="another checkout")  # results carry the mode in their names

