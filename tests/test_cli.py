"""``python -m resgd``: argument errors are clear, the named parts are called with one signature, a
signal stops a run in one line, and a standard output that cannot be written is one line, exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from resgd import cli

CALLS: list[tuple] = []


@pytest.fixture
def fake_targets(monkeypatch, tmp_path):
    """Two fake parts with the studies' one signature, ``reproduce(quick, figures_dir, *, n_jobs, scheduler)``."""
    CALLS.clear()
    monkeypatch.setenv("RESGD_OFFLINE", "1")  # `reproduce --only jena` first looks for the Jena file
    monkeypatch.setenv("RESGD_CACHE_DIR", str(tmp_path / "data_cache"))
    # the tests' own output folders: never the user's figures/ and results/, whose mode a build stamped
    monkeypatch.setenv("RESGD_FIGURES_DIR", str(tmp_path / "figures"))
    monkeypatch.setenv("RESGD_RESULTS_DIR", str(tmp_path / "results"))

    def part(name):
        return lambda quick, figures_dir, *, n_jobs, scheduler: CALLS.append((name, quick, figures_dir, n_jobs, scheduler))

    return {"setup": part("done"), "jena": part("jena")}


def test_reproduce_calls_the_named_parts(fake_targets, tmp_path, monkeypatch, capsys):
    import socket

    from resgd.pipeline import identity

    monkeypatch.setenv("RESGD_RESULTS_DIR", str(tmp_path / "before"))  # restored after the test
    monkeypatch.setattr(identity, "_dask_identity", lambda address, timeout: "Scheduler")  # a listener stands for one
    with socket.create_server(("127.0.0.1", 0)) as listening:  # the address is checked before any work
        address = f"tcp://127.0.0.1:{listening.getsockname()[1]}"
        code = cli.main(["reproduce", "--quick", "--only", "jena", "setup", "--figures-dir", str(tmp_path),
                         "--jobs", "1", "--results-dir", str(tmp_path / "r"), "--scheduler", address],
                        parts=fake_targets)
    assert code == 0
    assert CALLS == [("jena", True, str(tmp_path), 1, address), ("done", True, str(tmp_path), 1, address)]
    assert "jena, setup done" in capsys.readouterr().out
    import os

    assert os.environ["RESGD_RESULTS_DIR"] == str(tmp_path / "r")


def test_more_jobs_than_cores_run_as_many_as_the_cores_and_say_so(fake_targets, tmp_path, capsys):
    import os

    assert cli.main(["reproduce", "--quick", "--only", "setup", "--jobs", "100000"], parts=fake_targets) == 0
    cores = os.cpu_count() or 1
    assert CALLS[-1][3] == cores
    assert f"--jobs 100000 is more than this machine's {cores} cores" in capsys.readouterr().err


@pytest.mark.parametrize("variable, value, status, message", [  # 2: every bad setting
    ("RESGD_GRAD_BACKEND", "manual", 2, "$RESGD_GRAD_BACKEND: not a setting of this package"),  # retired: one engine
    ("RESGD_MKL_INTEL_PATH", "yes", 2, "$RESGD_MKL_INTEL_PATH='yes': expected 1"),
    ("RESGD_DATA_DIR", "/nonexistent/resgd-data", 2, "RESGD_DATA_DIR=/nonexistent/resgd-data: "),
    ("RESGD_MODE", "qiuck", 2, "$RESGD_MODE='qiuck': expected one of quick, full"),
    ("RESGD_OFFLINE", "maybe", 2, "$RESGD_OFFLINE='maybe': expected one of"),
    ("RESGD_MOD", "quick", 2, "$RESGD_MOD: not a setting of this package"),
])
def test_a_bad_setting_stops_reproduce_before_any_part_runs(fake_targets, tmp_path, monkeypatch, capsys,
                                                           variable, value, status, message):
    """Settings read deep inside a part are checked first: a typo costs no minutes of work."""
    monkeypatch.setenv(variable, value)
    code = cli.main(["reproduce", "--quick", "--only", "setup", "--figures-dir", str(tmp_path)], parts=fake_targets)
    assert code == status and CALLS == []
    assert message in capsys.readouterr().err


def test_unknown_name_is_a_clear_usage_error(fake_targets, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["reproduce", "--only", "figure9"], parts=fake_targets)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'figure9'" in err and "setup" in err and "jena" in err


@pytest.mark.parametrize("argv, message", [
    ([], "required: COMMAND"),
    (["reproduce", "--jobs", "0"], "expected a whole number >= 1"),
    (["reproduce", "--jobs", "two"], "expected a whole number >= 1, got 'two'"),
    (["reproduce", "--only"], "expected at least one argument"),
    (["reproduc"], "invalid choice: 'reproduc'"),
])
def test_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_default_parts_cover_the_documented_names_with_one_signature():
    import inspect

    parts = cli.study_parts()
    assert list(parts) == list(cli.PARTS) == ["setup", "theorem1", "collapse", "jena", "sst2", "robustness"]
    assert parts["jena"].__module__ == "resgd.experiments.study"
    assert parts["robustness"].__module__ == "resgd.robustness.study"
    for name, function in parts.items():
        params = inspect.signature(function).parameters
        assert list(params)[:2] == ["quick", "figures_dir"], name
        assert params["n_jobs"].kind is params["scheduler"].kind is inspect.Parameter.KEYWORD_ONLY, name


def test_info_prints_versions_and_data_source(monkeypatch, capsys):
    monkeypatch.setattr(cli, "data_sources", lambda: "jena: STAND-IN (synthetic)")
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "resgd " in out and "torch " in out and "STAND-IN" in out


def test_module_entry_point_help():
    proc = subprocess.run([sys.executable, "-m", "resgd", "reproduce", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "--only NAME" in proc.stdout and "--quick" in proc.stdout


def test_an_unwritable_output_folder_stops_the_run_before_any_part(fake_targets, tmp_path, monkeypatch):
    from resgd.pipeline.reproduce import OutputError

    monkeypatch.setenv("RESGD_RESULTS_DIR", str(tmp_path / "results"))
    (tmp_path / "cache").write_text("a file where the run cache should be")
    argv = ["reproduce", "--only", "setup", "jena", "--figures-dir", str(tmp_path / "figures"),
            "--results-dir", str(tmp_path)]
    with pytest.raises(OutputError, match="cache is not writable"):
        cli.main([*argv, "--debug"], parts=fake_targets)
    assert cli.main(argv, parts=fake_targets) == 1  # without --debug: one line, no traceback
    assert CALLS == []  # not even the part that writes only figures ran


# ---------------------------------------------------------------- errors of the user or the machine: one line, no traceback

WRITES = types.ModuleType("resgd_fake_writes")


def _writes_like_a_part(quick, directory, *, n_jobs, scheduler):
    """What every real part does: a table through resgd.infra.atomic into the results folder, a figure
    through resgd.plots.save_figure into the figures folder."""
    import os
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from resgd.infra.atomic import write_json
    from resgd.plots import save_figure

    write_json(Path(os.environ["RESGD_RESULTS_DIR"]) / "part" / "verdicts.json", {"claim": "reproduced"})
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3])
    ax.set_title("a figure")
    try:
        save_figure(fig, "part_figure", directory)
    finally:
        plt.close(fig)


WRITES.reproduce = _writes_like_a_part


@pytest.fixture
def writing_part(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, WRITES.__name__, WRITES)
    monkeypatch.setenv("RESGD_RESULTS_DIR", str(tmp_path / "unused"))  # restored after the test
    targets = {"setup": lambda *args, **kwargs: WRITES.reproduce(*args, **kwargs)}  # looked up when called: tests replace it
    argv = ["reproduce", "--only", "setup", "--figures-dir", str(tmp_path / "figures"), "--results-dir", str(tmp_path / "results")]
    return targets, argv


def _one_line_error(capsys) -> str:
    """The one ``error:`` line on stderr (after the progress bar's lines, if any); no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    return errors[0]


def test_the_writing_part_works(writing_part, tmp_path):
    targets, argv = writing_part
    assert cli.main(argv, parts=targets) == 0
    assert (tmp_path / "results" / "part" / "verdicts.json").is_file()
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == [".resgd-mode", "part_figure.pdf", "part_figure.png"]


def test_results_path_that_is_a_file(writing_part, tmp_path, capsys):
    targets, argv = writing_part
    (tmp_path / "results").write_text("not a folder")
    assert cli.main(argv, parts=targets) == 1
    line = _one_line_error(capsys)
    assert str(tmp_path / "results" / "part") in line and "Not a directory" in line and "--results-dir" in line


@pytest.mark.parametrize("folder", ["results", "figures"])
def test_read_only_output_folder(writing_part, tmp_path, capsys, monkeypatch, folder):
    """A folder the process may not write in (injected: the tests may run as root, who may write anywhere)."""
    import errno
    import tempfile

    import resgd.infra.atomic

    real_mkstemp = tempfile.mkstemp

    def mkstemp(prefix="", suffix="", dir=None):
        if str(dir).startswith(str(tmp_path / folder)):
            raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/{prefix}xxxxxxxx{suffix}")
        return real_mkstemp(prefix=prefix, suffix=suffix, dir=dir)

    monkeypatch.setattr(resgd.infra.atomic.tempfile, "mkstemp", mkstemp)
    targets, argv = writing_part
    assert cli.main(argv, parts=targets) == 1
    line = _one_line_error(capsys)
    assert "Permission denied" in line and str(tmp_path / folder) in line and "not writable" in line


def test_full_disk_while_writing_a_table(writing_part, tmp_path, capsys, monkeypatch):
    import errno
    from pathlib import Path

    real_write_text = Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name.endswith(".part"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    targets, argv = writing_part
    assert cli.main(argv, parts=targets) == 1
    line = _one_line_error(capsys)
    assert "verdicts.json: No space left on device; the disk is full" in line
    assert not any((tmp_path / "results" / "part").iterdir())  # no temporary left behind


def test_full_disk_while_writing_a_pdf_figure_is_not_a_zlib_error(writing_part, tmp_path, capsys, monkeypatch):
    """A full disk inside a PDF stream: matplotlib's own clean-up raises zlib.error, which hid the cause."""
    from test_plots_save import FullDisk

    from matplotlib.figure import Figure

    real_savefig = Figure.savefig

    def savefig(self, fname, **kwargs):
        return real_savefig(self, FullDisk(600) if kwargs.get("format") == "pdf" else fname, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    targets, argv = writing_part
    assert cli.main(argv, parts=targets) == 1
    line = _one_line_error(capsys)
    assert "part_figure.pdf: No space left on device; the disk is full" in line and "zlib" not in line


def test_bad_data_is_one_line_with_exit_1(writing_part, capsys, monkeypatch):
    from resgd.data import DataError

    def bad_data(quick, directory, *, n_jobs, scheduler):
        raise DataError("/data/sst2/train.tsv.gz: cannot read the file; it is truncated or corrupt")

    monkeypatch.setattr(WRITES, "reproduce", bad_data)
    targets, argv = writing_part
    assert cli.main(argv, parts=targets) == 1
    assert _one_line_error(capsys) == "error: /data/sst2/train.tsv.gz: cannot read the file; it is truncated or corrupt"


def test_a_bug_keeps_its_traceback(writing_part, monkeypatch):
    def bug(quick, directory, *, n_jobs, scheduler):
        raise KeyError("not an error of the user")

    monkeypatch.setattr(WRITES, "reproduce", bug)
    targets, argv = writing_part
    with pytest.raises(KeyError):
        cli.main(argv, parts=targets)


def test_missing_data_dir_is_reported(fake_targets, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RESGD_DATA_DIR", str(tmp_path / "no_such_folder"))
    assert cli.main(["reproduce", "--only", "jena"], parts=fake_targets) == 2  # a bad setting: exit 2, as the README promises
    line = _one_line_error(capsys)
    assert f"RESGD_DATA_DIR={tmp_path / 'no_such_folder'}" in line and "does not exist" in line
    assert CALLS == []  # before any work


def test_jena_on_the_standin_is_said_on_the_console(fake_targets, tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    (data / "jena").mkdir(parents=True)
    monkeypatch.setenv("RESGD_DATA_DIR", str(data))
    assert cli.main(["reproduce", "--only", "jena"], parts=fake_targets) == 0
    err = capsys.readouterr().err
    assert "note: jena runs on the SYNTHETIC stand-in" in err and "RESGD_OFFLINE" in err
    (data / "jena" / "jena_climate_2009_2016.csv").write_text("the real file is here")
    assert cli.main(["reproduce", "--only", "jena"], parts=fake_targets) == 0
    assert "SYNTHETIC" not in capsys.readouterr().err


@pytest.mark.parametrize("debug", [[], ["--debug"]])
def test_module_entry_point_config_error(debug, monkeypatch):
    """``python -m resgd`` on a real part with a bad setting: exit 2, the message alone; --debug adds the traceback."""
    import os

    env = {**os.environ, "RESGD_MODE": "qiuck", "RESGD_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "resgd", *debug, "reproduce", "--quick", "--only", "setup"],
                          capture_output=True, text=True, timeout=300, env=env)
    if debug:
        assert proc.returncode == 1 and "Traceback" in proc.stderr and "SettingError" in proc.stderr  # a ConfigError
    else:
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == \
            "error: $RESGD_MODE='qiuck': expected one of quick, full"  # resgd.settings' one format


def test_jena_advice_works_from_the_command_line(tmp_path, monkeypatch, capsys):
    """A Jena-format file that is not the canonical one, in a (read-only, shared) data folder: the
    advice was to delete it or to pass check_canonical=False, neither of which works from here."""
    from resgd.data.standin import write_standin_csv

    data = tmp_path / "data"
    write_standin_csv(data / "jena" / "jena_climate_2009_2016.csv", days=2)
    for name, value in {"RESGD_DATA_DIR": data, "RESGD_OFFLINE": 1, "RESGD_CACHE_DIR": tmp_path / "cache",
                        "RESGD_RESULTS_DIR": tmp_path / "results"}.items():
        monkeypatch.setenv(name, str(value))
    assert cli.main(["reproduce", "--quick", "--only", "jena", "--figures-dir", str(tmp_path / "figures")]) == 1
    line = _one_line_error(capsys)
    assert "not the canonical Jena climate file: 288 data rows" in line
    assert "which is only read: replace it with a good copy, or set RESGD_DATA_DIR to a folder holding a good jena/" in line
    assert "pass check_canonical=False" not in line and "delete" not in line.lower()


# ---------------------------------------------------------------- settings


@pytest.mark.parametrize("env, flag, quick", [({}, [], False), ({"RESGD_MODE": "quick"}, [], True),
                                              ({"RESGD_MODE": "full"}, ["--quick"], True)])
def test_reproduce_honours_resgd_mode(fake_targets, tmp_path, monkeypatch, env, flag, quick):
    """The mode is ``--quick`` if given, else ``$RESGD_MODE``, else full."""
    monkeypatch.delenv("RESGD_MODE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["reproduce", *flag, "--only", "setup", "--figures-dir", str(tmp_path)], parts=fake_targets) == 0
    assert CALLS == [("done", quick, str(tmp_path), 2, None)]


@pytest.mark.parametrize("address, words", [("tcp://127.0.0.1:1", "nothing answers at 127.0.0.1:1"),
                                            ("tcp:/127.0.0.1", "not an address of the form tcp://HOST:PORT")])
def test_a_bad_scheduler_address_is_one_line_and_exit_2_before_any_work(fake_targets, tmp_path, capsys, address, words):
    """An unusable scheduler address is one line and exit 2 within seconds, before any part runs."""
    import time

    start = time.monotonic()
    code = cli.main(["reproduce", "--only", "setup", "--figures-dir", str(tmp_path), "--scheduler", address],
                    parts=fake_targets)
    err = capsys.readouterr().err.strip()
    assert code == 2 and CALLS == [] and words in err and "\n" not in err
    assert time.monotonic() - start < 30  # the check waits at most SCHEDULER_CHECK_S (5 s) per address


def test_mkl_intel_path_yes_is_one_line_exit_2_from_python_m_resgd(tmp_path):
    """A bad ``$RESGD_MKL_INTEL_PATH`` is checked before the MKL re-exec, inside the command line's error
    handling: one line naming the variable and what it accepts, exit 2, no traceback."""
    import os

    env = {**os.environ, "RESGD_MKL_INTEL_PATH": "yes"}
    done = subprocess.run([sys.executable, "-m", "resgd", "info"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == "error: $RESGD_MKL_INTEL_PATH='yes': expected 1 (use MKL's Intel path) or 0/unset (MKL's default)"


STOPPABLE_CLI = """
import sys, time
from resgd import cli
def reproduce(quick, figures_dir, *, n_jobs, scheduler):
    print("started", flush=True)
    time.sleep(600)
raise SystemExit(cli.main(["reproduce", "--only", "setup", "--figures-dir", sys.argv[1]], parts={"setup": reproduce}))
"""


@pytest.mark.parametrize("signame, status", [("SIGTERM", 143), ("SIGINT", 130)])
def test_reproduce_stops_on_a_signal_in_one_line(tmp_path, signame, status):
    """A signal stops reproduce in one line, without a traceback: exit 143 for SIGTERM, 130 for SIGINT."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "RESGD_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", STOPPABLE_CLI, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "started"
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    lines = [line for line in err.splitlines() if line.strip() and "reproduce (" not in line and "%|" not in line]
    assert proc.returncode == status and "Traceback" not in err
    assert lines == [f"python -m resgd reproduce stopped by {signame}; its worker processes were ended; "
                     f"the results computed so far are cached and a new run resumes from them"]


ROOT = Path(__file__).resolve().parents[1]


def _closed_pipe() -> int:
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("where, said", [
    ("/dev/full", "standard output cannot be written (No space left on device)"),
    ("a closed pipe", "standard output cannot be written (Broken pipe)"),
    ("closed", "standard output is closed (started with >&-?)"),
], ids=["dev-full", "closed-pipe", "closed"])
def test_a_standard_output_that_cannot_be_written_is_one_line_and_exit_1(tmp_path, where, said):
    """Standard output that cannot be written (``> /dev/full``, a closed pipe, a closed stdout ``>&-``)
    is one line naming standard output and what to do, exit 1 (as documented), not a message about
    "writing a file" or a silent exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RESGD_OFFLINE": "1"}
    command = [sys.executable, "-m", "resgd", "info"]
    if where == "/dev/full":
        with open("/dev/full", "w") as full:
            out = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    elif where == "a closed pipe":
        fd = _closed_pipe()
        try:
            out = subprocess.run(command, stdout=fd, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
        finally:
            os.close(fd)
    else:
        out = subprocess.run(command, stderr=subprocess.PIPE, text=True, env=env, timeout=300, preexec_fn=lambda: os.close(1))
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 1, out.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: {said}"), out.stderr[-2000:]
    assert "/dev/null" in lines[0]
