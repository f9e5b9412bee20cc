"""The output guard (tests/output_guard.py): it fails a run whose tests wrote into the user's folders
(that with it the tests that run full-mode parts pass beside a user's quick build: tests/test_newcomer.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import output_guard

TESTS = Path(__file__).resolve().parent

WRITES = '''
import os
from pathlib import Path

def test_writes_into_the_users_figures():
    Path("figures/new.png").write_bytes(b"png")

def test_changes_a_table():
    Path("results/tables/a.csv").write_text("a,b\\n1,2\\n")

def test_writes_where_the_variables_say():
    for variable in ("RESGD_FIGURES_DIR", "RESGD_RESULTS_DIR"):
        Path(os.environ[variable]).mkdir(parents=True)
        (Path(os.environ[variable]) / "own.txt").write_text("mine")
'''


def _fake_repository(root: Path, mode: str = "full") -> Path:
    """A user's folders: figures/ and results/ stamped with ``mode``, one table."""
    for folder in ("figures", "results"):
        (root / folder).mkdir(parents=True)
        (root / folder / ".resgd-mode").write_text(f"{mode}\n")
    (root / "results" / "tables").mkdir()
    (root / "results" / "tables" / "a.csv").write_text("a\n1\n")
    return root


def _pytest(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in (output_guard.ACTIVE, "PYTEST_XDIST_WORKER",
                                                               "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST",
                                                               "RESGD_MODE")}  # unset: full
    clean["PYTHONPATH"] = os.pathsep.join([str(TESTS), clean.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          env={**clean, **env}, capture_output=True, text=True, timeout=300)


def test_the_guard_fails_a_run_that_wrote_into_the_users_folders(tmp_path):
    """Two xdist workers, as the suite runs: the controller's check names the files and the tests."""
    user = _fake_repository(tmp_path / "user")
    (user / "pytest.ini").write_text("[pytest]\n")  # not the project's addopts
    (user / "test_writes.py").write_text(WRITES)
    proc = _pytest(["-p", "output_guard", "--output-guard-root", str(user), "-n", "2", "test_writes.py"], cwd=user)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "3 passed" in out, out  # the tests pass; the run fails
    line = next(ln for ln in out.splitlines() if ln.startswith("tests changed the user's outputs"))
    assert "figures/new.png (new)" in line and "results/tables/a.csv (changed)" in line, line
    assert "own.txt" not in line and "figures/.resgd-mode" not in line, line
    named = [ln for ln in out.splitlines() if ln.startswith("  after ")]
    assert any("test_writes.py::test_writes_into_the_users_figures: " in ln for ln in named), out
    assert any("test_writes.py::test_changes_a_table: " in ln for ln in named), out


def test_the_guard_passes_a_run_that_wrote_only_its_own_folders(tmp_path):
    user = _fake_repository(tmp_path / "user")
    (user / "pytest.ini").write_text("[pytest]\n")
    (user / "test_own.py").write_text(WRITES.split("def test_writes_into")[0]
                                      + "def test_writes_where" + WRITES.split("def test_writes_where")[1])
    proc = _pytest(["-p", "output_guard", "--output-guard-root", str(user), "-n", "0", "test_own.py"], cwd=user)
    assert proc.returncode == 0 and "tests changed the user's outputs" not in proc.stdout, proc.stdout + proc.stderr


def test_listing_sees_sizes_mtimes_links_and_removals(tmp_path):
    root = _fake_repository(tmp_path)
    (root / "figures" / "fig.png").symlink_to(".resgd-builds/current-full/figures/fig.png")
    before = output_guard.listing(root)
    table = root / "results" / "tables" / "a.csv"
    table.write_text("a\n2\n")  # same size
    os.utime(table, ns=(1, 1))
    (root / "figures" / "fig.png").unlink()
    (root / "figures" / "fig.png").symlink_to(".resgd-builds/current-quick/figures/fig.png")
    (root / "results" / ".resgd-mode").unlink()
    (root / "_build" / "screenshots").mkdir(parents=True)  # the tests' own
    (root / "_build" / "screenshots" / "index.png").write_bytes(b"png")
    assert output_guard.changes(before, output_guard.listing(root)) == [
        "_build (new)", "figures/fig.png (changed)", "results/.resgd-mode (removed)", "results/tables/a.csv (changed)"]
    # a folder is compared by its entries, not its mtime: the tests' own screenshots folder, made in a
    # built site's _build/, changes _build's mtime and nothing else of the user's
    (root / "_build" / "html").mkdir()
    before = output_guard.listing(root)
    (root / "_build" / "screenshots" / "other.png").write_bytes(b"png")
    os.utime(root / "_build", ns=(2, 2))
    assert output_guard.changes(before, output_guard.listing(root)) == []


# The guard beside a real quick build (a full-mode part through the CLI's default folders passes with the
# guard's folders and is refused without them): tests/test_newcomer.py, on its quick build.
