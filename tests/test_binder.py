"""The Binder launch button: binder/ installs the project's pins, and the button opens a file that exists.

repo2docker cannot run here (no network for its image), so its configuration files are checked:
pip's own parser reads ``binder/requirements.txt`` (the same constraints file as ``make install``),
``binder/postBuild`` runs on a ``git archive`` of HEAD (what Binder clones), and the URL of each launch button
(from ``_config.yml``'s repository, or an example one while it names none, and from the built pages
when the site is there) must name a file that exists after it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from resgd.publish.toc import toc_notebooks
from resgd.publish.lab import SETTINGS_DIR
from test_site import read, require_site

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
LOCK = ROOT / "requirements.lock"


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[normalize(name)] = version
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def binder_requirements():
    from pip._internal.network.session import PipSession
    from pip._internal.req.req_file import parse_requirements

    return list(parse_requirements(str(BINDER / "requirements.txt"), session=PipSession()))


def test_binder_installs_the_locked_pins_and_the_book_extra():
    reqs = binder_requirements()
    constraints = {r.requirement for r in reqs if r.constraint}
    assert {normalize(c.split("==")[0]): c.split("==")[1] for c in constraints} == lock_pins()
    assert {Path(r.comes_from.split(" ", 1)[1].split(" (")[0]).resolve() for r in reqs if r.constraint} == {LOCK}
    installs = [r for r in reqs if not r.constraint]
    assert [(r.requirement, r.is_editable) for r in installs] == [(".[book]", True)]


def test_binder_takes_torch_from_the_cpu_wheel_index():
    """The lock's torch pin is met by PyTorch's CPU build (2.13.0+cpu): no CUDA libraries in the image."""
    from pip._internal.req.req_file import get_line_parser

    lines = [line for line in (BINDER / "requirements.txt").read_text().splitlines() if line.startswith("--")]
    options = get_line_parser(None)(" ".join(lines))[1]
    assert options.extra_index_urls == ["https://download.pytorch.org/whl/cpu"] and not options.index_url
    assert lock_pins()["torch"] == "2.13.0"


def test_the_book_extra_holds_lab_and_jupytext_pinned_as_locked():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["book"]
    pins = dict(re.match(r"([\w.-]+)==([\w.+-]+)", r).groups() for r in extra if "==" in r)
    locked = lock_pins()
    for name in ("jupyterlab", "jupytext", "ipykernel"):
        assert pins[name] == locked[name], name


def test_binder_python_is_the_projects():
    major, minor = re.search(r"version_info\[:2\] != \((\d+), (\d+)\)", (ROOT / "Makefile").read_text()).groups()
    assert (BINDER / "runtime.txt").read_text().strip() == f"python-{major}.{minor}"


EXAMPLE_REPOSITORY = "https://github.com/example/resgd-book"
"""A repository address for checking the buttons' files while ``_config.yml`` names none."""


def launch_urls_from_config(url: str | None = None) -> dict[str, str]:
    """The Binder URL of each notebook page, built as sphinx-book-theme builds it, for the repository
    ``url`` (default ``_config.yml``'s; none when it is empty: then no page has a Binder button)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    buttons, repo = config["launch_buttons"], config["repository"]
    url = repo["url"] if url is None else url
    if not url:
        return {}
    org_repo = urlsplit(url).path.strip("/")
    ui = {"classic": "tree", "jupyterlab": "lab/tree"}[buttons.get("notebook_interface", "classic")]
    base = f"{buttons['binderhub_url'].rstrip('/')}/v2/gh/{org_repo}/{repo['branch']}"
    return {name: f"{base}?urlpath={ui}/notebooks/{name}.ipynb" for name in toc_notebooks(ROOT / "_toc.yml")}


def opened_file(url: str) -> str:
    urlpath = parse_qs(urlsplit(url).query)["urlpath"][0]
    prefix = "lab/tree/"
    assert urlpath.startswith(prefix), f"{url}: not a JupyterLab file URL"
    return urlpath[len(prefix):]


@pytest.fixture(scope="module")
def built_image(tmp_path_factory):
    """A scratch copy of the repository after binder/postBuild, with its NB_PYTHON_PREFIX."""
    repo = tmp_path_factory.mktemp("repo")
    prefix = tmp_path_factory.mktemp("prefix")
    if (ROOT / ".git").exists():  # what Binder gets: the committed tree, not the working tree
        archive = subprocess.run(["git", "archive", "--format=tar", "HEAD", "binder", "notebooks", SETTINGS_DIR],
                                 cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True)
    else:  # a source tree without git (an sdist): its files are all there is
        for folder in ("binder", "notebooks", SETTINGS_DIR):
            shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints"))
    env = {**os.environ, "NB_PYTHON_PREFIX": str(prefix),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    result = subprocess.run(["bash", "binder/postBuild"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return repo, prefix


def test_postbuild_makes_the_notebooks_and_installs_the_lab_settings(built_image):
    repo, prefix = built_image
    installed = prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert installed.read_text() == (ROOT / SETTINGS_DIR / "overrides.json").read_text()
    import jupytext

    for name in toc_notebooks(ROOT / "_toc.yml"):
        pair = jupytext.read(repo / "notebooks" / f"{name}.ipynb")
        assert [c.source for c in pair.cells] == [c.source for c in jupytext.read(ROOT / "notebooks" / f"{name}.md").cells]


def test_launch_urls_open_files_that_exist(built_image):
    repo, _ = built_image
    urls = launch_urls_from_config() or launch_urls_from_config(EXAMPLE_REPOSITORY)
    assert urls and all(u.startswith("https://mybinder.org/v2/gh/") for u in urls.values())
    for name, url in urls.items():
        path = opened_file(url)
        assert (repo / path).is_file(), f"the Binder button of {name} opens {path}, which postBuild does not make"


@pytest.mark.site
def test_built_pages_carry_the_binder_button_when_a_repository_is_named(built_image):
    require_site()
    repo, _ = built_image
    expected = launch_urls_from_config()
    for name in toc_notebooks(ROOT / "_toc.yml"):
        html = read(f"notebooks/{name}.html").replace("&amp;", "&")
        found = re.findall(r'href="(https://mybinder\.org/v2/gh/[^"]+)"', html)
        if not expected:  # no repository: a button would open one that does not exist
            assert not found, f"notebooks/{name}.html has a Binder button but _config.yml names no repository"
            continue
        assert found, f"notebooks/{name}.html has no Binder button"
        assert set(found) == {expected[name]}
        assert (repo / opened_file(found[0])).is_file()
        assert "colab.research.google.com" not in html
