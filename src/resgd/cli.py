"""Command line: regenerate the book's figures and tables without Jupyter.

::

    python -m resgd reproduce [--quick] [--only NAME ...] [--figures-dir DIR] [--results-dir DIR] [--jobs N]
                              [--scheduler ADDRESS]
    python -m resgd results [--jobs N] [--scheduler ADDRESS] [--no-recheck]
    python -m resgd verify [--jobs N] [--scheduler ADDRESS] [--seed SEED]
    python -m resgd info

Errors of the user or the machine (bad or missing data, a setting that cannot be used, a folder
that cannot be written, a full disk, a standard output that cannot be written: closed, a closed
pipe, a full disk) print one line and exit with 1 (data, files, standard output) or 2 (usage, and
source files edited while the run imported them); ``--debug`` shows the traceback (see
:mod:`resgd.infra.user_errors`).

``NAME`` is one of ``setup``, ``theorem1``, ``collapse``, the paper's data sets (``jena``, ``sst2``:
the records of :mod:`resgd.dataset_registry`), ``robustness`` (default: all, in that order). :func:`study_parts` maps each name to its study's entry point, all with one
signature, ``reproduce(quick, figures_dir, *, n_jobs, scheduler)``; every one runs through
:func:`resgd.pipeline.reproduce.reproduce_part`. ``--scheduler`` sends the sweeps to a scheduler
(:mod:`resgd.pipeline.sweep`). Sizes come from each study's presets (``--quick`` selects the quick
ones), the same ones the notebooks use.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from . import dataset_registry as registry

PARTS = ("setup", "theorem1", "collapse", *registry.paper_names(), "robustness")
"""The parts of ``reproduce``, in the order they run (the book's order)."""

WRITES_RESULTS = (*registry.paper_names(), "robustness")
"""Parts that write tables into the results folder and use the run cache."""

Part = Callable[..., dict]
"""A study's entry point: ``reproduce(quick, figures_dir, *, n_jobs, scheduler) -> {name: path}``."""


def study_parts() -> dict[str, Part]:
    """Part name → the study's ``reproduce`` function (imported here, when a command runs: the
    studies import torch, which ``--help`` and argument errors do not need)."""
    from .collapse import study as collapse
    from .experiments.study import reproducer
    from .robustness import study as robustness
    from .theorem1 import study as theorem1

    return {
        "setup": theorem1.reproduce_setup,
        "theorem1": theorem1.reproduce_theorem1,
        "collapse": collapse.reproduce,
        **{name: reproducer(name) for name in registry.paper_names()},
        "robustness": robustness.reproduce,
    }


def build_parser(names: Sequence[str] = PARTS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m resgd",
        description="Reproduce the companion's figures and tables (arXiv 2506.05249) without Jupyter.",
    )
    debug = {"action": "store_true", "help": "show the Python traceback of an error, not only its message"}
    parser.add_argument("--debug", **debug)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    rep = commands.add_parser("reproduce", help="regenerate figures, tables and claim verdicts")
    rep.add_argument("--debug", **debug, default=argparse.SUPPRESS)  # before or after the command
    rep.add_argument("--quick", action="store_const", const="quick", dest="mode", default=None,
                     help="the quick smoke sizes (a few minutes) instead of the full ones (default: $RESGD_MODE, else full)")
    rep.add_argument("--only", nargs="+", metavar="NAME", choices=list(names),
                     help=f"only these parts (choose from: {', '.join(names)}); default: all")
    rep.add_argument("--figures-dir", metavar="DIR", default=None,
                     help="where figures go (default: $RESGD_FIGURES_DIR, else ./figures)")
    rep.add_argument("--results-dir", metavar="DIR", default=None,
                     help="where tables, verdicts and the run cache go (default: $RESGD_RESULTS_DIR, else ./results)")
    rep.add_argument("--jobs", type=_positive_int, default=2, metavar="N",
                     help="parallel training runs for jena/sst2 (default: 2)")
    rep.add_argument("--scheduler", metavar="ADDRESS", default=None,
                     help="run the sweeps on this scheduler (e.g. tcp://host:8786) instead of local processes "
                          "(default: $RESGD_SCHEDULER, else local)")
    for name, text in (("results", "compute every result the full book needs that the results store lacks, "
                                    "re-check the stored ones, and say what changed (make results)"),
                       ("verify", "prove the results store: checksums, keys, every run's first iterations and a "
                                  "seeded sample re-executed bit for bit (make verify)")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--debug", **debug, default=argparse.SUPPRESS)
        sub.add_argument("--jobs", type=_positive_int, default=2, metavar="N", help="parallel processes (default: 2)")
        sub.add_argument("--scheduler", metavar="ADDRESS", default=None,
                         help="compute on this Dask scheduler instead of local processes")
        if name == "verify":
            sub.add_argument("--seed", default=None, help="the sample's seed (default: the checkout's commit)")
        else:
            sub.add_argument("--no-recheck", action="store_true",
                             help="trust the stored entries instead of re-executing their first iterations")
    info = commands.add_parser("info", help="print versions and where the data come from (real or stand-in)")
    info.add_argument("--debug", **debug, default=argparse.SUPPRESS)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def reproduce_command(args: argparse.Namespace, parts: Mapping[str, Part] | None = None, out=print) -> int:
    from tqdm.std import tqdm  # plain text bar: no ipywidgets warning in notebooks

    from . import settings

    names = list(dict.fromkeys(args.only or list(PARTS if parts is None else parts)))
    settings.check_path_option("--results-dir", args.results_dir)
    settings.check_path_option("--figures-dir", args.figures_dir)
    if args.results_dir is not None:
        os.environ["RESGD_RESULTS_DIR"] = str(args.results_dir)
    if args.figures_dir is not None:
        args.figures_dir = os.path.abspath(os.path.expanduser(args.figures_dir))
    settings.absolute_paths()  # once, here: every later reader (and child process) sees absolute folders
    check_environment()  # the settings first: a typo is named before the parts' imports (torch: seconds)
    functions = study_parts() if parts is None else parts
    mode = settings.mode(args.mode)  # --quick, else $RESGD_MODE, else full
    quick = mode == "quick"
    writes_results = any(name in WRITES_RESULTS for name in names)
    check_outputs(args.figures_dir, writes_results=writes_results)
    claim_outputs(args.figures_dir, mode)
    scheduler = check_scheduler(args.scheduler)
    args.jobs = bounded_jobs(args.jobs, scheduler)
    _note_standins(names)
    bar = tqdm(names, desc=f"reproduce ({mode})", unit="part")
    with settings.mode_set(mode):  # each part publishes under its mode's pointer (resgd.pipeline.reproduce)
        for name in bar:
            bar.set_postfix_str(name)
            start = time.perf_counter()
            functions[name](quick, args.figures_dir, n_jobs=args.jobs, scheduler=scheduler)
            tqdm.write(f"{name}: done in {time.perf_counter() - start:.1f} s")
    out(f"reproduce ({mode}): {', '.join(names)} done")
    return 0


def store_command(args: argparse.Namespace) -> int:
    """``results`` (:func:`resgd.study_store.refresh`) or ``verify`` (:func:`resgd.study_store.verify`)."""
    from . import settings, study_store

    settings.absolute_paths()
    check_environment()
    scheduler = check_scheduler(args.scheduler)
    args.jobs = bounded_jobs(args.jobs, scheduler)
    if args.command == "verify":
        study_store.verify(n_jobs=args.jobs, scheduler=scheduler, seed=args.seed)
    else:
        study_store.refresh(n_jobs=args.jobs, scheduler=scheduler, recheck=not args.no_recheck)
    return 0


def bounded_jobs(jobs: int, scheduler: str | None) -> int:
    """``--jobs``, at most this machine's cores when the work runs here (more processes than cores only
    wait, and each holds the data and a worker's memory); said on stderr when lowered."""
    cores = os.cpu_count() or 1
    if scheduler is None and jobs > cores:
        print(f"note: --jobs {jobs} is more than this machine's {cores} cores: running {cores} at a time",
              file=sys.stderr)
        return cores
    return jobs


def check_environment() -> None:
    """Every ``$RESGD_*`` setting, checked before the first part starts (a typo would otherwise
    surface only after minutes of work): :func:`resgd.settings.check_all`."""
    from . import settings

    settings.check_all()


def check_scheduler(address: str | None) -> str | None:
    """The scheduler address (``--scheduler``, else ``$RESGD_SCHEDULER``), parsed and reached now,
    before any work (:func:`resgd.pipeline.identity.check_scheduler`); None for local processes."""
    from .pipeline.identity import check_scheduler as check, resolve_scheduler

    resolved = resolve_scheduler(address)
    if resolved is not None:
        check(resolved)
    return resolved


def check_outputs(figures_dir: str | None, *, writes_results: bool) -> None:
    """Every folder the run will write is writable, checked before the first part starts."""
    from .pipeline.cache import resolve_cache_dir, resolve_results_dir
    from .pipeline.reproduce import check_writable
    from .plots.style import figures_dir as resolve_figures_dir

    folders = [resolve_figures_dir(figures_dir)]
    if writes_results:
        folders += [resolve_results_dir(), resolve_cache_dir()]
    check_writable(folders)


def claim_outputs(figures_dir: str | None, mode: str) -> None:
    """Stamp the figures folder with ``mode``; refuse one that holds the other mode's figures
    (:mod:`resgd.infra.mode_stamp`). The results folder needs no stamp: its tables and verdicts
    carry the mode in their names and its cache entries are keyed by configuration."""
    from .infra.mode_stamp import claim
    from .plots.style import figures_dir as resolve_figures_dir

    claim(resolve_figures_dir(figures_dir), mode, how_to_move="--figures-dir or $RESGD_FIGURES_DIR")


def _note_standins(names: Sequence[str]) -> None:
    """Say on the console, before the work starts, which data sets will run on their synthetic stand-in."""
    for record in registry.paper():
        if record.name in names and record.source is not None:
            path, reason = record.source()
            if path is None:
                print(f"note: {record.name} runs on the SYNTHETIC stand-in, not on measurements: {reason}", file=sys.stderr)


def info_command(out=print) -> int:
    import numpy
    import pandas
    import torch

    import resgd

    out(f"resgd {resgd.__version__}")
    out(f"python {platform.python_version()} ({sys.executable})")
    out(f"torch {torch.__version__}, numpy {numpy.__version__}, pandas {pandas.__version__}")
    for name in ("matplotlib", "seaborn", "joblib", "tqdm"):
        try:
            out(f"{name} {importlib.import_module(name).__version__}")
        except ImportError:
            out(f"{name}: not installed")
    from .settings import VARIABLES

    for variable in VARIABLES:
        out(f"{variable} = {os.environ.get(variable, '(unset)')}")
    from .infra.mkl_path import active

    out(f"MKL vendor-check stub (RESGD_MKL_INTEL_PATH): {'active' if active() else 'not active'}")
    out(f"data (checked without downloading): {data_sources()}")
    return 0


def data_sources() -> str:
    """One line per data set: real or stand-in, and the loader's source label (no download)."""
    import torch

    from .data.spec import DatasetSpec

    lines = []
    for record in registry.paper():
        name = record.name
        try:
            data = record.load(DatasetSpec(name, n_train=2, n_tokens=4, n_test=2), torch.float64, allow_download=False)
            kind = "STAND-IN (synthetic)" if data.is_standin else "real"
            lines.append(f"{name}: {kind} - {data.source_label}")
        except Exception as err:  # noqa: BLE001 - report, do not fail
            lines.append(f"{name}: not available ({type(err).__name__}: {err})")
    return "\n  " + "\n  ".join(lines)


def main(argv: Sequence[str] | None = None, *, parts: Mapping[str, Part] | None = None) -> int:
    """``parts`` replaces :func:`study_parts` (the tests pass their own)."""
    from .infra.user_errors import GuardedStdout, StdoutError, describe_stop, discard_stdout, stop_on_signals

    parser = build_parser(PARTS if parts is None else list(parts))
    args = parser.parse_args(argv)
    stdout = sys.stdout
    try:
        if stdout is None:  # started with >&-: a file opened later would take its place, in workers too
            raise StdoutError("standard output is closed (started with >&-?): a file opened later would take its "
                              "place and receive prints, workers' too; run with it open (> /dev/null to discard it); "
                              "nothing was run")
        sys.stdout = GuardedStdout(stdout)
        with stop_on_signals():  # SIGTERM as Ctrl-C: workers ended, one line, exit 143 (130 for Ctrl-C)
            if args.command == "reproduce":
                status = reproduce_command(args, parts)
            elif args.command in ("results", "verify"):
                status = store_command(args)
            else:
                status = info_command()
            sys.stdout.flush()  # now, so that a failure is reported here and not by Python at exit
            return status
    except KeyboardInterrupt as stop:
        status, message = describe_stop(stop, f"python -m resgd {args.command}")
        print(f"\n{message}; the results computed so far are cached and a new run resumes from them",
              file=sys.stderr)
        return status
    except Exception as err:
        from .infra.user_errors import describe  # imports the data package: only when needed

        described = None if args.debug else describe(err)
        if described is None:
            raise  # a bug (or --debug): the traceback is what helps
        status, message = described
        if isinstance(err, StdoutError) and stdout is not None:
            discard_stdout()
        print(f"\nerror: {message}", file=sys.stderr)  # after a progress bar's line
        return status
    finally:
        sys.stdout = stdout


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
