"""Open the book's notebooks in JupyterLab: ``make lab`` (``python -m resgd.publish.lab [JUPYTER ARGS]``).

The committed notebooks are MyST text files (``notebooks/*.md``). jupytext's server extension
(installed with the pinned ``jupytext``) serves them to JupyterLab as notebooks, and
``lab/overrides.json`` makes "Jupytext Notebook" their default viewer, so a click opens a
notebook, not the Markdown editor. Saving writes the ``.md`` (and its ``.ipynb`` pair).

The kernel is this interpreter's (the project's ``.venv``): ``JUPYTER_PREFER_ENV_PATH=1`` puts
the environment's kernel specs before a user's own ``python3``. The kernel sees the book build's
settings (:func:`resgd.publish.environment.notebook_env`): figures and the results cache at the repository
root, the inline figure backend, ``RESGD_DATA_DIR``/``RESGD_OFFLINE`` as exported by the caller,
and ``RESGD_MODE`` as set (unset: the notebooks run their quick sizes).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

from .environment import notebook_env
from .toc import find_root

SETTINGS_DIR = "lab"  # holds overrides.json: JupyterLab settings for this project (also used by binder/)
FIRST_NOTEBOOK = "notebooks/01_setup.md"


def lab_env(root: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the JupyterLab server and so of its kernels."""
    env = notebook_env(root, None, base)
    env["JUPYTER_PREFER_ENV_PATH"] = "1"
    return env


def lab_command(root: Path, extra: Sequence[str] = ()) -> list[str]:
    """``jupyter lab`` on the repository root, with the project's settings; ``extra`` is appended."""
    return [
        sys.executable, "-m", "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.app_settings_dir={root / SETTINGS_DIR}",
        f"--LabApp.default_url=/lab/tree/{FIRST_NOTEBOOK}",
        *(["--allow-root"] if os.geteuid() == 0 else []),  # containers and CI run as root
        *extra,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    root = find_root()
    env = lab_env(root)
    data = env.get("RESGD_DATA_DIR") or "unset: downloads into the cache"
    print(f"resgd.publish.lab: JupyterLab on {root}; open notebooks/*.md (they open as notebooks)\n"
          f"resgd.publish.lab: kernel {sys.executable}; RESGD_MODE={env.get('RESGD_MODE') or 'unset (quick)'};"
          f" RESGD_DATA_DIR={data}", flush=True)
    os.execve(sys.executable, lab_command(root, args), env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
