"""Tests never write into, nor read the mode of, the user's own output folders (a pytest plugin).

Why: a newcomer runs ``make book MODE=quick``, then ``make test``. The CLI's default folders
(``./figures``, ``./results`` and its run cache ``results/cache``) then hold the user's quick build,
stamped ``quick`` (:mod:`resgd.infra.mode_stamp`): a test that ran a full-mode part there was refused,
and one that succeeded would have replaced the user's outputs with a test's.

* Every test runs with ``$RESGD_FIGURES_DIR`` and ``$RESGD_RESULTS_DIR`` (whose ``cache/`` is the
  run cache) pointed at new, empty folders of its own, whatever the shell sets. A test that needs
  other folders sets them itself (``monkeypatch``); one that needs the built site reads ``_build/html``
  by its path, as before.
* The repository's own output folders (:data:`WATCHED`: ``figures/``, ``results/``, ``_build/`` and
  the results store; not the tests' screenshots, :data:`OWN`) are listed (names, kinds, sizes, mtimes, link targets) when the session starts
  and when it ends; any difference fails the run, naming the files, and the tests after which the
  worker saw ``figures/`` or ``results/`` change (a test on the other worker may be the one that wrote).
  Under pytest-xdist the session check runs in the controller, the per-test one in each worker.
* Not redirected: the download cache (``$RESGD_CACHE_DIR``, else the per-user cache). It holds
  inputs under hashed names (downloads, parsed arrays, the MKL stub), the same for both modes, and
  without ``$RESGD_DATA_DIR`` it is where the tests find the data.

``--output-guard-root PATH`` watches another folder's outputs (the guard's own tests).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

WATCHED = ("figures", "results", "_build", "store")
"""The repository's folders a test must leave as they were (the CLI's and the book build's outputs, the store)."""

OWN = ("_build/screenshots",)
"""Folders under :data:`WATCHED` that belong to the tests: the browser and lab checks save their screenshots
there for a reader of the run (tests/test_browser.py, tests/test_lab.py)."""

PER_TEST = ("figures", "results")
"""Listed after every test, to name the test (cheap: the user's outputs, not the whole site or store)."""

REDIRECTED = {"RESGD_FIGURES_DIR": "figures", "RESGD_RESULTS_DIR": "results"}
"""Each variable that chooses an output folder, and the folder's name under the test's own folder."""

ACTIVE = "_RESGD_OUTPUT_GUARD_SESSION"
"""Set by the outermost session: a session inside a test (pytester) leaves the check to it."""

PROPERTY = "user_outputs_changed"
SHOWN = 12
"""Paths named per line (a rebuilt book changes thousands)."""


def _root(config: pytest.Config) -> Path:
    given = config.getoption("output_guard_root")
    return Path(given).resolve() if given else Path(__file__).resolve().parents[1]


def listing(root: Path, folders: tuple[str, ...] = WATCHED) -> dict[str, tuple]:
    """Every entry under ``root/<folder>`` (links not followed): kind, size, mtime and link target by path."""
    found: dict[str, tuple] = {}

    def add(path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return  # removed while listed
        rel = path.relative_to(root).as_posix()
        if any(rel == own or rel.startswith(own + "/") for own in OWN):
            return
        if os.path.islink(path):
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():  # its entries are listed themselves; its mtime moves with any of them
            found[rel] = ("folder",)
        else:
            found[rel] = ("file", st.st_size, st.st_mtime_ns)

    for name in folders:
        top = root / name
        if not os.path.lexists(top):
            continue
        add(top)
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if (Path(folder) / d).relative_to(root).as_posix() not in OWN]
            for entry in dirs + files:
                add(Path(folder) / entry)
    return found


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """One ``path (what)`` per difference, sorted."""
    out = [f"{p} (new)" for p in after.keys() - before.keys()]
    out += [f"{p} (removed)" for p in before.keys() - after.keys()]
    out += [f"{p} (changed)" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(out)


def _shown(changed: list[str]) -> str:
    return ", ".join(changed[:SHOWN]) + (f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else "")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--output-guard-root", default=None,
                     help="the folder whose figures/, results/, _build/ and store/ no test may change (default: the repository)")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class Guard:
    """One session's state: the start listing (where the session check runs) and the flagged tests."""

    def __init__(self, root: Path, check: bool):
        self.root, self.check = root, check
        self.start: dict[str, tuple] = {}
        self.last: dict[str, tuple] = {}
        self.flagged: list[str] = []
        self.report: list[str] = []

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.check:
            self.start = listing(self.root)
        self.last = listing(self.root, PER_TEST)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Where the session check runs (xdist's controller gets the workers' reports), the tests
        after which the user's folders had changed."""
        if report.when == "teardown":
            self.flagged += [f"{report.nodeid}: {value}" for name, value in report.user_properties if name == PROPERTY]

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.check:
            return
        os.environ.pop(ACTIVE, None)
        changed = changes(self.start, listing(self.root))
        if not changed and not self.flagged:
            return
        self.report = [f"tests changed the user's outputs in {self.root}: {_shown(changed) or 'changed, then put back'}; "
                       f"a test must write under its own folders ($RESGD_FIGURES_DIR, $RESGD_RESULTS_DIR, tmp_path), "
                       f"not the repository's"]
        self.report += [f"  after {flagged}" for flagged in self.flagged[:SHOWN]]
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        for line in self.report:
            terminalreporter.write_line(line, red=True, bold=not line.startswith(" "))


def pytest_configure(config: pytest.Config) -> None:
    check = not _is_worker(config) and not os.environ.get(ACTIVE)
    if check:
        os.environ[ACTIVE] = "1"  # the xdist workers, started after this, inherit it
    config._output_guard = Guard(_root(config), check)
    config.pluginmanager.register(config._output_guard)


@pytest.fixture(autouse=True)
def _own_output_folders(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                        monkeypatch: pytest.MonkeyPatch):
    """The test's own figures and results folders; after it, whether the user's changed (named in the report)."""
    base = tmp_path_factory.mktemp("outputs")
    for variable, name in REDIRECTED.items():
        monkeypatch.setenv(variable, str(base / name))
    yield
    guard = request.config._output_guard
    now = listing(guard.root, PER_TEST)
    changed = changes(guard.last, now)
    guard.last = now
    if changed:
        request.node.user_properties.append((PROPERTY, _shown(changed)))
