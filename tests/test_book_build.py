"""Unit tests of the book build (resgd.publish.build and the modules it ties together: toc, environment,
notebook_run, schedule, report): TOC order, mode resolution, execution and its failures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import psutil
import pytest
from jupytext.cli import jupytext as jupytext_cli

from resgd.publish import build as bb
from resgd.publish.environment import INLINE_BACKEND, notebook_env, notebook_jobs, notebook_quick, resolve_mode
from resgd.publish.notebook_run import PARTIAL_DIR, md_to_ipynb, publish
from resgd.publish.report import REPORT, Record, write_report
from resgd.publish.schedule import notebook_needs
from resgd.publish.toc import BookBuildError, find_root, select, toc_docs, toc_notebooks

ROOT = Path(__file__).resolve().parents[1]

HEADER = """---
jupytext:
  formats: ipynb,md:myst
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
    jupytext_version: {jupytext_version}
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

""".replace("{jupytext_version}", jupytext.__version__)  # as in notebooks/*.md, which the installed jupytext wrote


def code(src: str, tags: str = "") -> str:
    return "```{code-cell} ipython3\n" + (f":tags: [{tags}]\n\n" if tags else "") + src + "\n```\n"


PARAMETERS = "from resgd.publish.build import notebook_quick\n\nquick = notebook_quick()\nseed = 0"  # as in notebooks/*.md


def make_book(tmp_path: Path, notebooks: dict[str, str]) -> Path:
    """A tiny book: a _toc.yml listing ``notebooks`` (name -> code of one cell) after an intro."""
    (tmp_path / "notebooks").mkdir()
    chapters = "".join(f"      - file: notebooks/{name}\n" for name in notebooks)
    (tmp_path / "_toc.yml").write_text(f"format: jb-book\nroot: intro\nparts:\n  - chapters:\n{chapters}")
    for name, src in notebooks.items():
        body = f"# {name}\n\n" + code(PARAMETERS, "parameters") + "\n" + code(src)
        (tmp_path / "notebooks" / f"{name}.md").write_text(HEADER + body)
    return tmp_path


# ---------------------------------------------------------------- TOC


def test_toc_order_of_the_book():
    assert toc_notebooks(ROOT / "_toc.yml") == [
        "01_setup", "02_theorem1", "03_rank_collapse", "04_jena", "05_sst2", "06_robustness", "07_claims",
    ]
    docs = toc_docs(ROOT / "_toc.yml")
    assert docs[0] == "book/intro"
    assert docs.index("notebooks/02_theorem1") < docs.index("book/theorem1_proof") < docs.index("notebooks/03_rank_collapse")
    assert docs[-4:] == ["book/choices", "book/reproduce", "book/references", "book/cite"]


def test_toc_nested_sections_and_suffixes(tmp_path):
    toc = tmp_path / "_toc.yml"
    toc.write_text(
        "format: jb-book\nroot: notebooks/00_root\n"
        "chapters:\n"
        "  - file: notebooks/02_b.md\n"
        "    sections:\n"
        "      - file: notebooks/01_a\n"
        "      - url: https://example.org\n"
        "  - file: book/about\n"
        "  - file: notebooks/03_c.ipynb\n"
    )
    assert toc_notebooks(toc) == ["00_root", "02_b", "01_a", "03_c"]
    assert toc_docs(toc) == ["notebooks/00_root", "notebooks/02_b", "notebooks/01_a", "book/about", "notebooks/03_c"]


def test_select_by_name_or_prefix():
    names = ["01_setup", "02_theorem1", "03_rank_collapse"]
    assert select(names, None) == names
    assert select(names, ["03", "01_setup"]) == ["01_setup", "03_rank_collapse"]
    assert select(names, ["notebooks/02_theorem1.md"]) == ["02_theorem1"]
    with pytest.raises(BookBuildError):
        select(names, ["0"])  # ambiguous
    with pytest.raises(BookBuildError):
        select(names, ["99"])


def test_find_root(tmp_path):
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert find_root(tmp_path / "a" / "b") == tmp_path.resolve()


# ---------------------------------------------------------------- mode


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        (None, {}, "full"),
        (None, {"RESGD_MODE": "quick"}, "quick"),
        (None, {"RESGD_MODE": " Quick "}, "quick"),
        (None, {"RESGD_MODE": ""}, "full"),
        ("full", {"RESGD_MODE": "quick"}, "full"),
        ("quick", {"RESGD_MODE": "full"}, "quick"),
    ],
)
def test_resolve_mode(flag, env, expected):
    assert resolve_mode(flag, env) == expected


def test_resolve_mode_rejects_unknown():
    with pytest.raises(ValueError):
        resolve_mode(None, {"RESGD_MODE": "fast"})
    with pytest.raises(SystemExit):  # argparse refuses it before anything runs
        bb.main(["--mode", "fast"])


@pytest.mark.parametrize("env, expected", [({}, True), ({"RESGD_MODE": ""}, True), ({"RESGD_MODE": "quick"}, True),
                                            ({"RESGD_MODE": " Full "}, False)])
def test_notebook_quick_reads_the_mode_and_defaults_to_quick(env, expected):
    assert notebook_quick(env) is expected


def test_notebook_jobs_is_one_in_quick_mode_two_in_full_unless_given():
    assert (notebook_jobs(None, True), notebook_jobs(None, False)) == (1, 2)
    assert (notebook_jobs(3, True), notebook_jobs(1, False)) == (3, 1)  # the reader's own number


def test_a_book_process_glues_without_the_iri_grammar_and_still_validates_notebooks():
    """resgd.publish keeps jsonschema's IRI checker (``rfc3987_syntax``: 1.1 CPU-s of grammar per process)
    out of the notebooks' kernels, whose glue imports nbformat and jsonschema; nbformat still validates.
    The control: without resgd.publish, myst-nb's glue does import it (else the block is no longer needed)."""
    kernel = ("import sys, resgd.publish.build, nbformat\n"
              "from myst_nb import glue\n"
              "glue('x', 1, display=False)\n"
              "nbformat.validate(nbformat.v4.new_notebook())\n"
              "print(sys.modules['rfc3987_syntax'])")
    assert subprocess.run([sys.executable, "-c", kernel], capture_output=True, text=True, check=True).stdout.strip() == "None"
    control = "import sys\nfrom myst_nb import glue\nglue('x', 1, display=False)\nprint(sys.modules.get('rfc3987_syntax') is not None)"
    assert subprocess.run([sys.executable, "-c", control], capture_output=True, text=True, check=True).stdout.strip() == "True"


def test_notebook_quick_names_the_variable_it_rejects():
    with pytest.raises(ValueError, match=r"\$RESGD_MODE='fast': expected one of quick, full"):  # the settings module's one format
        notebook_quick({"RESGD_MODE": "fast"})


def test_notebook_env_forces_inline_backend_and_paths(tmp_path):
    env = notebook_env(tmp_path, "quick", {"MPLBACKEND": "Agg", "RESGD_MODE": "full"})
    assert env["MPLBACKEND"] == INLINE_BACKEND  # Agg would turn glued figures into text
    assert env["RESGD_MODE"] == "quick"
    assert env["RESGD_FIGURES_DIR"] == str(tmp_path / "figures")
    assert env["RESGD_RESULTS_DIR"] == str(tmp_path / "results")
    assert notebook_env(tmp_path, "quick", {"RESGD_RESULTS_DIR": "/elsewhere"})["RESGD_RESULTS_DIR"] == "/elsewhere"


# ---------------------------------------------------------------- conversion and report


def test_md_to_ipynb_keeps_cells_and_sets_kernel(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("# T\n\n" + code("quick = True", "parameters"))  # no front matter
    out = tmp_path / "out" / "x.ipynb"
    md_to_ipynb(md, out)
    nb = nbformat.read(out, as_version=4)
    assert nb.metadata.kernelspec.name == "python3"
    cell = next(c for c in nb.cells if c.cell_type == "code")
    assert cell.metadata.tags == ["parameters"]


def test_publish_makes_papermills_paths_relative_to_the_book(tmp_path):
    output, executed = tmp_path / "_build" / "notebook_outputs" / "01_a.ipynb", tmp_path / "notebooks" / "01_a.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", metadata={"papermill": {"status": "completed"}, "tags": []})])
    nb.metadata["papermill"] = {"input_path": str(tmp_path / "_build" / "notebook_inputs" / "01_a.ipynb"),
                                "output_path": str(output), "parameters": {}, "duration": 1.5}
    output.parent.mkdir(parents=True)
    executed.parent.mkdir()
    nbformat.write(nb, output)
    publish(output, executed, tmp_path)
    got = nbformat.read(executed, as_version=4)
    assert got.metadata.papermill == {"input_path": "_build/notebook_inputs/01_a.ipynb",
                                      "output_path": "_build/notebook_outputs/01_a.ipynb", "parameters": {}, "duration": 1.5}
    assert got.cells[0].metadata == {} and not output.exists()


def test_report_is_written_atomically(tmp_path):
    path = tmp_path / "_build" / "execution_report.json"
    records = [Record("notebooks/01_a", "quick", 1.5, True), Record("notebooks/02_b", "quick", 0.5, False, "boom")]
    write_report(path, records, "quick", 2.0)
    data = json.loads(path.read_text())
    assert data["mode"] == "quick" and data["ok"] is False
    assert [r["notebook"] for r in data["notebooks"]] == ["notebooks/01_a", "notebooks/02_b"]
    assert set(data["notebooks"][0]) >= {"notebook", "mode", "seconds", "ok"}
    assert [p.name for p in path.parent.iterdir()] == ["execution_report.json"]  # no temp file left


# ---------------------------------------------------------------- execution (a kernel each: a few seconds)


def test_build_runs_in_toc_order_with_quick_parameter_and_publishes_only_finished_notebooks(tmp_path, capsys):
    """One build of two notebooks: the parameters reach the kernel, the executed notebook is the
    .md's jupytext pair, nothing is in notebooks/ while a notebook runs (``make html`` renders
    notebooks/*.ipynb), and a notebook without a ``parameters`` cell is run with a warning."""
    src = (
        "import json, os, pathlib\n"
        "pathlib.Path('seen.json').write_text(json.dumps({'quick': quick, 'mode': os.environ['RESGD_MODE'],"
        " 'figures': os.environ['RESGD_FIGURES_DIR'], 'cwd': os.getcwd()}))\n"
        "pathlib.Path('during.json').write_text(json.dumps(sorted(p.name for p in pathlib.Path('.').glob('*.ipynb'))))"
    )
    root = make_book(tmp_path, {"01_ok": src, "02_noparams": "x = quick"})
    md = root / "notebooks" / "02_noparams.md"
    md.write_text(md.read_text().replace(":tags: [parameters]\n", ""))
    assert bb.main(["--root", str(root), "--mode", "quick"]) == 0  # papermill injects the parameters at the top
    seen = json.loads((root / "notebooks" / "seen.json").read_text())
    figures = Path(seen.pop("figures"))  # the notebook's own workspace, published with the build in one switch
    stages = root / "figures" / ".resgd-builds" / "stages"
    assert figures.parts[-3:] == ("work", "01_ok", "figures") and figures.is_relative_to(stages)
    assert seen == {"quick": True, "mode": "quick", "cwd": str(root / "notebooks")}
    assert list(stages.iterdir()) == []  # the stage and its workspaces are gone with the build
    assert json.loads((root / "notebooks" / "during.json").read_text()) == []  # nothing while it ran
    assert (root / "notebooks" / "01_ok.ipynb").is_file()  # published when it finished
    assert not list((root / "_build").rglob("01_ok.ipynb.*.part"))
    executed = nbformat.read(root / "notebooks" / "01_ok.ipynb", as_version=4)
    source = jupytext.read(root / "notebooks" / "01_ok.md")
    # the executed notebook is the .md's jupytext pair: the same cells with the same tags, and no
    # run metadata that `jupytext --sync` would write back into the source
    assert [(c.cell_type, c.source, c.metadata.get("tags")) for c in executed.cells] == \
        [(c.cell_type, c.source, c.metadata.get("tags")) for c in source.cells]
    assert not any("papermill" in c.metadata for c in executed.cells)
    run = executed.metadata.papermill  # the download names no path of the build machine
    assert (run.input_path, run.output_path) == ("_build/notebook_inputs/01_ok.ipynb", "_build/notebook_outputs/01_ok.ipynb")
    assert str(root) not in json.dumps(executed.metadata)
    md = root / "notebooks" / "01_ok.md"
    text = md.read_text()
    assert jupytext_cli(["--sync", str(md)]) == 0
    assert md.read_text() == text
    report = json.loads((root / "_build" / "execution_report.json").read_text())
    assert report["ok"] and [r["notebook"] for r in report["notebooks"]] == ["notebooks/01_ok", "notebooks/02_noparams"]
    out = capsys.readouterr()
    assert "notebooks/01_ok" in out.out  # per-notebook wall time printed
    assert "no cell tagged `parameters`" in out.err


def test_a_failing_notebook_is_named_with_its_cell_and_the_last_good_outputs_stay(tmp_path, capsys):
    """One build, stopped by its second notebook: the error names the notebook and its cell; the build
    stops there; the failed notebook's previous .ipynb stays and its partial output is kept outside
    notebooks/; the report keeps the earlier record of the notebook the build did not reach."""
    root = make_book(tmp_path, {"01_ok": "x = 1", "02_bad": "raise ValueError('deliberate failure')", "03_after": "y = 2"})
    (root / "notebooks" / "02_bad.ipynb").write_text("{}")  # an output of an earlier run
    (root / "notebooks" / "03_after.ipynb").write_text("{}")
    write_report(root / REPORT, [Record("notebooks/03_after", "full", 3.0, True)], "full", 3.0)
    # a long timeout, so that a slow start-up cannot turn the failure into a timeout
    assert bb.main(["--root", str(root), "--mode", "full", "--timeout", "120"]) == 1
    err = capsys.readouterr().err
    assert "notebooks/02_bad.md failed" in err
    assert "ValueError: deliberate failure" in err
    assert "code cell 2 `raise ValueError('deliberate failure')`" in err  # numbered as in the .md
    assert "(the previous notebooks/02_bad.ipynb is kept)" in err
    report = json.loads((root / "_build" / "execution_report.json").read_text())
    assert [(r["notebook"], r["ok"]) for r in report["notebooks"]] == \
        [("notebooks/01_ok", True), ("notebooks/02_bad", False), ("notebooks/03_after", True)]
    assert report["mode"] == "full" and not report["ok"]
    assert (root / "notebooks" / "03_after.ipynb").read_text() == "{}"  # stops at the first failure: not run
    assert sorted(p.name for p in (root / "notebooks").iterdir() if p.name.startswith("02")) == ["02_bad.ipynb", "02_bad.md"]
    assert (root / "notebooks" / "02_bad.ipynb").read_text() == "{}"
    partial = root / PARTIAL_DIR / "02_bad.ipynb"  # kept for a look, outside the book's sources
    assert partial.is_file() and str(partial.relative_to(root)) in err


def time_out_in_the_slow_cell(root: Path, started: Path) -> Record:
    """Build ``root``'s one notebook until it times out *inside* its slow cell, which writes ``started``.

    The timeout counts papermill's and the kernel's start-up too: on a loaded CI machine (the other
    test worker busy) they once took more than 6 s, so the slow cell had not begun and the error
    could not name it. Each try that times out before the cell begins doubles the time.
    """
    for timeout in (6, 12, 24):
        record = bb.build(root, "quick", timeout=timeout, log=lambda *a: None)[0]
        assert not record.ok
        assert f"timed out after {timeout} s" in record.error
        assert record.seconds < timeout + 20
        if started.exists():
            return record
    pytest.fail(f"the kernel never began the slow cell within {timeout} s")


def test_timeout_kills_the_notebook_and_keeps_the_previous_ipynb(tmp_path):
    src = "import os, pathlib, time\npathlib.Path('kernel.pid').write_text(str(os.getpid()))\ntime.sleep(120)"
    root = make_book(tmp_path, {"01_slow": src})
    (root / "notebooks" / "01_slow.ipynb").write_text("{}")  # an output of an earlier run
    pid_file = root / "notebooks" / "kernel.pid"
    record = time_out_in_the_slow_cell(root, pid_file)
    assert "code cell 2 `import os, pathlib, time` was running" in record.error
    kernel = int(pid_file.read_text())
    deadline = time.monotonic() + 1  # the kernel's own parent-poller would take ~2 s
    while psutil.pid_exists(kernel) and psutil.Process(kernel).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the kernel outlived the timeout"
        time.sleep(0.1)
    assert "(the previous notebooks/01_slow.ipynb is kept)" in record.error
    assert (root / "notebooks" / "01_slow.ipynb").read_text() == "{}"
    assert sorted(p.name for p in (root / "notebooks").iterdir()) == ["01_slow.ipynb", "01_slow.md", "kernel.pid"]
    partial = root / PARTIAL_DIR / "01_slow.ipynb"
    assert partial.is_file() and str(partial.relative_to(root)) in record.error


def test_missing_source_fails(tmp_path):
    root = make_book(tmp_path, {"01_gone": "x = 1"})
    (root / "notebooks" / "01_gone.md").unlink()
    records = bb.build(root, "quick", log=lambda *a: None)
    assert not records[0].ok and "no source" in records[0].error


def test_only_reruns_one_notebook_and_keeps_the_others_in_the_report(tmp_path):
    root = make_book(tmp_path, {"01_a": "x = 1", "02_b": "y = 2", "03_c": "z = 3"})
    (root / "notebooks" / "01_a.ipynb").write_text("{}")  # executed earlier; 03_c never was
    earlier = [Record(f"notebooks/{n}", "full", 9.0, True) for n in ("01_a", "02_b", "03_c")]
    write_report(root / REPORT, earlier, "full", 27.0)
    records = bb.build(root, "quick", only=["02"], log=lambda *a: None)
    assert [(r.notebook, r.mode, r.ok) for r in records] == [("notebooks/02_b", "quick", True)]
    report = json.loads((root / REPORT).read_text())
    assert [(r["notebook"], r["mode"]) for r in report["notebooks"]] == [("notebooks/01_a", "full"), ("notebooks/02_b", "quick")]
    assert (root / "notebooks" / "01_a.ipynb").read_text() == "{}"  # not run again


# ---------------------------------------------------------------- several notebooks at a time


def needs_header(md: Path, needs: list[str]) -> None:
    """Give ``md`` a header ``resgd: needs:`` (as notebooks/07_claims.md has)."""
    text = md.read_text()
    text = text.replace("  formats: ipynb,md:myst\n", "  formats: ipynb,md:myst\n  notebook_metadata_filter: resgd\n", 1)
    md.write_text(text.replace("  name: python3\n---\n", f"  name: python3\nresgd:\n  needs: [{', '.join(needs)}]\n---\n", 1))


WAIT_FOR = (  # a notebook that fails unless the file `other` appears within 60 s (so: unless both run at once)
    "import pathlib, time\npathlib.Path('{me}.started').write_text('x')\n"
    "deadline = time.monotonic() + 60\n"
    "while not pathlib.Path('{other}.started').exists():\n"
    "    assert time.monotonic() < deadline, 'ran alone'\n    time.sleep(0.05)"
)


def test_two_jobs_run_two_notebooks_at_once_and_a_notebook_waits_for_its_needs(tmp_path):
    stamp = "import pathlib, time\npathlib.Path('{me}.done').write_text(repr(time.time()))"
    collect = ("import pathlib, time\nnow = time.time()\n"
               "assert all(float(pathlib.Path(f'{n}.done').read_text()) < now for n in ('01_a', '02_b'))")
    root = make_book(tmp_path, {
        "01_a": WAIT_FOR.format(me="01_a", other="02_b") + "\n" + stamp.format(me="01_a"),
        "02_b": WAIT_FOR.format(me="02_b", other="01_a") + "\n" + stamp.format(me="02_b"),
        "03_collect": collect,
        "04_free": "x = 1",
    })
    needs_header(root / "notebooks" / "03_collect.md", ["01_a", "02_b"])
    assert notebook_needs(root / "notebooks" / "03_collect.md") == ["01_a", "02_b"]
    records = bb.build(root, "quick", jobs=2, log=lambda *a: None)
    assert [(r.notebook, r.ok) for r in records] == [(f"notebooks/{n}", True) for n in ("01_a", "02_b", "03_collect", "04_free")]
    md = root / "notebooks" / "03_collect.md"
    text = md.read_text()
    assert jupytext_cli(["--sync", str(md)]) == 0 and md.read_text() == text  # the header survives a sync


def test_one_job_runs_one_notebook_at_a_time(tmp_path):
    root = make_book(tmp_path, {"01_a": WAIT_FOR.format(me="01_a", other="02_b").replace("60", "3"), "02_b": "x = 1"})
    records = bb.build(root, "quick", log=lambda *a: None)
    assert not records[0].ok and "ran alone" in records[0].error


def test_a_notebook_whose_need_failed_does_not_run(tmp_path):
    root = make_book(tmp_path, {"01_bad": "raise ValueError('deliberate failure')", "02_after": "x = 1", "03_free": "y = 2"})
    needs_header(root / "notebooks" / "02_after.md", ["01_bad"])
    records = bb.build(root, "quick", keep_going=True, jobs=2, log=lambda *a: None)
    assert [(r.notebook, r.ok) for r in records] == [("notebooks/01_bad", False), ("notebooks/02_after", False),
                                                     ("notebooks/03_free", True)]
    assert "not run: needs ['01_bad'], which failed" in records[1].error
    assert not (root / "notebooks" / "02_after.ipynb").exists()


def test_bad_needs_and_bad_jobs_are_named(tmp_path):
    root = make_book(tmp_path, {"01_a": "x = 1"})
    needs_header(root / "notebooks" / "01_a.md", ["09_nowhere"])
    with pytest.raises(BookBuildError, match=r"notebooks/01_a.md: needs \['09_nowhere'\], which the TOC does not list"):
        bb.build(root, "quick", log=lambda *a: None)
    with pytest.raises(BookBuildError, match="--jobs: expected an integer >= 1, got 0"):
        bb.build(root, "quick", jobs=0, log=lambda *a: None)


def test_the_books_needs_name_notebooks_of_the_toc():
    toc = toc_notebooks(ROOT / "_toc.yml")
    needs = {name: notebook_needs(ROOT / "notebooks" / f"{name}.md") for name in toc}
    assert needs["07_claims"] == ["04_jena", "05_sst2"]  # it collects their verdicts
    assert all(n in toc for wanted in needs.values() for n in wanted)


def test_longest_chain_starts_first_and_ties_keep_the_toc_order():
    from resgd.publish.schedule import longest_first

    names = ["01_short", "02_long", "03_middle", "04_after", "05_unknown", "06_tie"]
    needs = {n: [] for n in names} | {"04_after": ["01_short"]}
    estimates = {"01_short": 10, "02_long": 50, "03_middle": 30, "04_after": 35, "06_tie": 30}
    # 01_short's chain is 10 + 35 (04_after needs it); a notebook without an estimate goes first
    assert longest_first(names, needs, estimates) == ["05_unknown", "02_long", "01_short", "04_after", "03_middle",
                                                      "06_tie"]
    assert longest_first(names, needs, {}) == names  # no estimates: the TOC's order


def test_the_estimates_name_the_books_notebooks_and_start_the_shortest_last():
    from resgd.publish.schedule import ESTIMATE_S, longest_first

    toc = toc_notebooks(ROOT / "_toc.yml")
    needs = {name: notebook_needs(ROOT / "notebooks" / f"{name}.md") for name in toc}
    for mode, estimates in ESTIMATE_S.items():
        assert sorted(estimates) == sorted(toc), mode  # a renamed or new notebook gets its estimate
        order = longest_first(toc, needs, estimates)
        assert order[-1] == min(toc, key=estimates.get) != toc[-1], mode  # the shortest last, not 07_claims
        assert order.index("07_claims") > max(order.index("04_jena"), order.index("05_sst2"))


# ---------------------------------------------------------------- SIGTERM


def test_sigterm_to_the_build_ends_papermill_and_its_kernel_in_one_line(tmp_path):
    """SIGTERM to the build ends papermill, its kernel and the kernel's workers, which run in sessions
    of their own and would otherwise go on writing figures: one line, exit 143, no page published."""
    src = "import os, pathlib, time\npathlib.Path('kernel.pid').write_text(str(os.getpid()))\ntime.sleep(600)"
    root = make_book(tmp_path, {"01_slow": src})
    pid_file = root / "notebooks" / "kernel.pid"
    proc = subprocess.Popen([sys.executable, "-m", "resgd.publish.build", "--mode", "quick", "--root", str(root),
                             "--timeout", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # papermill's and the kernel's start-up on a loaded machine
        while not (pid_file.is_file() and pid_file.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, "the slow cell never began"
            time.sleep(0.2)
        kernel = int(pid_file.read_text())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("book_build: book_build stopped by SIGTERM")
    deadline = time.monotonic() + 30
    while psutil.pid_exists(kernel) and psutil.Process(kernel).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the kernel outlived the build"
        time.sleep(0.2)
    assert not (root / "notebooks" / "01_slow.ipynb").exists()


@pytest.mark.parametrize("signame, status", [("SIGTERM", 143), ("SIGINT", 130), ("SIGHUP", 129)])
def test_every_stopping_signal_takes_the_one_stop_path(signame, status):
    """SIGHUP (a closed terminal) used to end the build silently while papermill and its kernel ran on;
    it now raises the same stop as SIGTERM, whose clean-up the test above follows end to end."""
    import os

    from resgd.infra.user_errors import Stopped, describe_stop, stop_on_signals

    with pytest.raises(Stopped) as stop, stop_on_signals():
        os.kill(os.getpid(), getattr(signal, signame))
        time.sleep(5)  # interrupted by the handler
    code, line = describe_stop(stop.value, "book_build")
    assert code == status and line.startswith(f"book_build stopped by {signame}")


def test_a_broken_notebook_header_is_one_error_line(tmp_path, capsys):
    """A broken MyST/YAML header in a notebook is one ``error:`` line naming the file, the line and the
    problem, not a YAML traceback; exit 2, nothing run or published."""
    root = make_book(tmp_path, {"01_a": "x = 1"})
    md = root / "notebooks" / "01_a.md"
    md.write_text(md.read_text().replace("kernelspec:\n", "kernelspec: [\n", 1))
    assert bb.main(["--root", str(root), "--mode", "quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    line = md.read_text().splitlines().index("  language: python") + 1
    assert err.startswith(f"book_build: error: {md}, line {line}: the notebook's header is not valid YAML")
    assert not (root / "notebooks" / "01_a.ipynb").exists()


def test_a_book_build_in_a_read_only_checkout_is_one_line(tmp_path, monkeypatch, capsys):
    """A book build in a read-only checkout is one line and exit 1, not an OSError traceback."""
    import errno

    from resgd.publish import build

    shutil.copy(ROOT / "_toc.yml", tmp_path / "_toc.yml")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("*.ipynb"))
    real = os.mkdir

    def read_only(path, *args, **kwargs):
        if str(path).startswith(str(tmp_path)):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only)
    assert build.main(["--root", str(tmp_path), "--only", "01", "--mode", "quick"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"book_build: error: {tmp_path / 'figures'}: Read-only file system; ")
