"""Every ``RESGD_*`` setting, read from the environment and validated in this one module.

Why one module: the settings were read in nine modules with three defaults for the same mode and
a typo surfaced only deep inside a run (or never: a mistyped mode ran full). Each function below
reads one variable each time it is called (tests and the book build change the environment), and
:func:`check_all` validates every one before any work starts. A bad value is a
:class:`SettingError`: one line naming the variable, the value and what was expected; the command
line exits with status 2 for it (:mod:`resgd.infra.user_errors`).

The mode rule (one rule for every entry point): an explicit flag (``--mode``, ``--quick``) wins,
else ``$RESGD_MODE``, else ``full`` — except in a notebook opened by hand (``interactive=True``),
which runs ``quick`` when ``$RESGD_MODE`` is unset; the book build always sets ``$RESGD_MODE`` for
its notebooks, so the exception never applies to what is published.

Two caches with two names: :func:`download_cache_dir` (``$RESGD_CACHE_DIR``: downloaded and parsed
data) and :func:`results_dir` (``$RESGD_RESULTS_DIR``, whose ``cache/`` holds the training runs,
see :func:`resgd.pipeline.cache.resolve_cache_dir`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .validation import ConfigError

MODES = ("quick", "full")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")

VARIABLES: dict[str, str] = {
    "RESGD_MODE": "quick or full (a flag overrides it); unset: full (a notebook opened by hand: quick)",
    "RESGD_DATA_DIR": "an existing folder holding jena/, sst2/, glove/; unset: the download cache",
    "RESGD_CACHE_DIR": "where downloaded and parsed data are cached; unset: the per-user cache",
    "RESGD_OFFLINE": "1/true/yes/on forbids downloads; 0/false/no/off or unset allows them",
    "RESGD_RESULTS_DIR": "tables, verdicts and the run cache (its cache/); unset: ./results",
    "RESGD_FIGURES_DIR": "where figures are saved; unset: ./figures",
    "RESGD_SCHEDULER": "a Dask scheduler address (tcp://host:port); unset: local processes",
    "RESGD_MKL_INTEL_PATH": "1 preloads the MKL vendor-check stub; 0 or unset: MKL's default path",
    "RESGD_REQUIRE_SITE": "1 makes the site tests fail, not skip, without the built site",
    "RESGD_ARITHMETIC": "pinned (unset: the AVX2 kernels every x86-64 host runs alike) or native (each library's own)",
    "RESGD_STORE": "read (unset: results come from the store where it has them), require (a miss is an error), off",
    "RESGD_STORE_DIR": "the results store's folder; unset: store/ of the checkout the package runs from",
}
"""Every variable this package reads, with what it accepts (``python -m resgd info`` prints them)."""


class SettingError(ConfigError):
    """A ``RESGD_*`` variable whose value cannot be used (exit status 2, as every bad setting)."""


PATH_VARIABLES = ("RESGD_DATA_DIR", "RESGD_CACHE_DIR", "RESGD_RESULTS_DIR", "RESGD_FIGURES_DIR", "RESGD_STORE_DIR")
"""The settings that name folders: never empty, and made absolute once at startup (:func:`absolute_paths`)."""


def _path(name: str, environ: Mapping[str, str] | None) -> Path | None:
    """``$name`` as a path; None when unset. Set but empty is refused: it would silently mean the default."""
    env = _env(environ)
    if name not in env:
        return None
    value = env[name].strip()
    if not value:
        raise SettingError(f"${name} is set but empty: give it a folder, or unset it for the default ({VARIABLES[name]})")
    return Path(value).expanduser()


def check_path_option(option: str, value: str | os.PathLike | None) -> None:
    """A path given on the command line (``--results-dir``...): an empty one is refused, not taken
    as the default or the current folder."""
    if value is not None and not str(value).strip():
        raise SettingError(f"{option} '': an empty path; give a folder, or leave the option out for the default")


def absolute_paths(environ: dict[str, str] | None = None) -> None:
    """Make every relative path setting in ``environ`` (default: ``os.environ``) absolute, against the
    current folder, once at startup: the notebooks run in ``notebooks/`` and would read it relative to
    that (``RESGD_RESULTS_DIR=results`` became ``notebooks/results``)."""
    env = os.environ if environ is None else environ
    for name in PATH_VARIABLES:
        path = _path(name, env)
        if path is not None and not path.is_absolute():
            env[name] = os.path.abspath(path)


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _raw(name: str, environ: Mapping[str, str] | None) -> str:
    return _env(environ).get(name, "").strip()


def _choice(label: str, value: str, choices: tuple[str, ...]) -> str:
    """``value`` lower-cased if one of ``choices``; ``label`` names where it came from (``$VAR`` or ``--flag``)."""
    if value.lower() not in choices:
        raise SettingError(f"{label}={value!r}: expected one of {', '.join(choices)}")
    return value.lower()


def _flag(name: str, environ: Mapping[str, str] | None, true=_TRUE, false=_FALSE) -> bool:
    value = _raw(name, environ).lower()
    if value in true:
        return True
    if value in false:
        return False
    raise SettingError(f"${name}={value!r}: expected one of {', '.join(v for v in (*true, *false) if v)} (or unset)")


def mode(flag: str | None = None, *, interactive: bool = False, environ: Mapping[str, str] | None = None) -> str:
    """``quick`` or ``full``: ``flag`` if given, else ``$RESGD_MODE``, else ``full`` (``quick`` when
    ``interactive``: a notebook opened by hand). See the module docstring."""
    if flag is not None:
        return _choice("--mode", str(flag).strip(), MODES)
    value = _raw("RESGD_MODE", environ)
    if not value:
        return "quick" if interactive else "full"
    return _choice("$RESGD_MODE", value, MODES)



@contextmanager
def mode_set(value: str) -> Iterator[None]:
    """``$RESGD_MODE`` set to ``value`` inside the block, as it was after it (``reproduce --quick``:
    what its parts publish, and any process they start, follows the run's mode)."""
    before = os.environ.get("RESGD_MODE")
    os.environ["RESGD_MODE"] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("RESGD_MODE", None)
        else:
            os.environ["RESGD_MODE"] = before

def data_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """``$RESGD_DATA_DIR`` as a folder that exists, or None when unset (a typo must not silently
    send Jena to its synthetic stand-in)."""
    path = _path("RESGD_DATA_DIR", environ)
    if path is None:
        return None
    value = _raw("RESGD_DATA_DIR", environ)
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise SettingError(
            f"RESGD_DATA_DIR={value}: {path} {what}; set RESGD_DATA_DIR to the folder holding jena/, sst2/ "
            f"and glove/ (laid out like the project's shared data folder), or unset it to use the data "
            f"cache and downloads"
        )
    return path


def download_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$RESGD_CACHE_DIR``, else the per-user cache: downloaded and parsed data (not the run cache)."""
    path = _path("RESGD_CACHE_DIR", environ)
    if path is not None:
        return path
    import platformdirs

    return Path(platformdirs.user_cache_dir("resgd"))


def offline(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``$RESGD_OFFLINE`` forbids downloads."""
    return _flag("RESGD_OFFLINE", environ)


def results_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$RESGD_RESULTS_DIR``, else ``./results``."""
    return _path("RESGD_RESULTS_DIR", environ) or Path("results")


def figures_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$RESGD_FIGURES_DIR``, else ``./figures``."""
    return _path("RESGD_FIGURES_DIR", environ) or Path("figures")


def scheduler(environ: Mapping[str, str] | None = None) -> str | None:
    """``$RESGD_SCHEDULER`` (a scheduler address; checked when used: :func:`resgd.pipeline.identity.check_scheduler`), else None."""
    return _raw("RESGD_SCHEDULER", environ) or None


def mkl_intel_path(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``$RESGD_MKL_INTEL_PATH`` asks for MKL's Intel path (``1``; ``0`` or unset: no)."""
    value = _raw("RESGD_MKL_INTEL_PATH", environ)
    if value not in ("", "0", "1"):
        raise SettingError(f"$RESGD_MKL_INTEL_PATH={value!r}: expected 1 (use MKL's Intel path) or 0/unset (MKL's default)")
    return value == "1"


def require_site(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``$RESGD_REQUIRE_SITE=1`` makes the site tests fail rather than skip."""
    return _flag("RESGD_REQUIRE_SITE", environ)


ARITHMETICS = ("pinned", "native")
STORE_MODES = ("read", "require", "off")


def arithmetic(environ: Mapping[str, str] | None = None) -> str:
    """``pinned`` (unset) or ``native``: see :mod:`resgd.infra.arithmetic`."""
    value = _raw("RESGD_ARITHMETIC", environ)
    return _choice("$RESGD_ARITHMETIC", value, ARITHMETICS) if value else "pinned"


def store_mode(environ: Mapping[str, str] | None = None) -> str:
    """How the results store is used: ``read`` (unset), ``require`` (CI: a result missing from the
    store is an error, never computed) or ``off`` (every result computed or read from the run cache)."""
    value = _raw("RESGD_STORE", environ)
    return _choice("$RESGD_STORE", value, STORE_MODES) if value else "read"


def store_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """``$RESGD_STORE_DIR``, else ``store/`` beside the ``src/`` the package was imported from (a
    checkout), else None (an installed package without a checkout has no store)."""
    path = _path("RESGD_STORE_DIR", environ)
    if path is not None:
        return path
    checkout = Path(__file__).resolve().parents[2]
    return checkout / "store" if (checkout / "src" / "resgd").is_dir() else None


def check_all(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """Every setting, validated now (the first bad one raises :class:`SettingError`); also flags a
    ``RESGD_*`` variable this package does not know (a typo such as ``RESGD_MOD``)."""
    env = _env(environ)
    unknown = sorted(name for name in env if name.startswith("RESGD_") and name not in VARIABLES)
    if unknown:
        raise SettingError(f"${unknown[0]}: not a setting of this package (known: {', '.join(VARIABLES)}); "
                           f"unset it or fix its name")
    return {
        "RESGD_MODE": mode(environ=environ),
        "RESGD_DATA_DIR": data_dir(environ),
        "RESGD_CACHE_DIR": download_cache_dir(environ),
        "RESGD_OFFLINE": offline(environ),
        "RESGD_RESULTS_DIR": results_dir(environ),
        "RESGD_FIGURES_DIR": figures_dir(environ),
        "RESGD_SCHEDULER": scheduler(environ),
        "RESGD_MKL_INTEL_PATH": mkl_intel_path(environ),
        "RESGD_REQUIRE_SITE": require_site(environ),
        "RESGD_ARITHMETIC": arithmetic(environ),
        "RESGD_STORE": store_mode(environ),
        "RESGD_STORE_DIR": store_dir(environ),
    }
