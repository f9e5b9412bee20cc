"""``make lab``: JupyterLab on the project, started headless as a student would start it.

The server is :func:`resgd.publish.lab.lab_command` in :func:`resgd.publish.lab.lab_env` (what ``make lab`` runs),
on a free local port with a random token and a throw-away Jupyter config, runtime and
settings folders. Through its REST API the tests open ``notebooks/01_setup.md`` as a notebook
(jupytext's contents manager) and execute every code cell of it, in quick mode, in a kernel the
server starts, over the kernel's websocket, as JupyterLab does.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jupytext
import pytest
import requests
import websocket

from resgd.publish import lab
from resgd.theorem1.study import figure_name

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "notebooks/01_setup.md"
START_TIMEOUT_S = 120
CELL_TIMEOUT_S = 600

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------- without a server


def test_lab_env_keeps_the_readers_mode_and_prefers_the_project_kernel(tmp_path):
    env = lab.lab_env(tmp_path, {"PATH": "/usr/bin"})
    assert "RESGD_MODE" not in env  # the notebooks then run their quick sizes
    assert env["JUPYTER_PREFER_ENV_PATH"] == "1"
    assert env["RESGD_FIGURES_DIR"] == str(tmp_path / "figures")
    assert env["RESGD_RESULTS_DIR"] == str(tmp_path / "results")
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert lab.lab_env(tmp_path, {"RESGD_MODE": "full"})["RESGD_MODE"] == "full"


def test_lab_settings_open_markdown_with_jupytext():
    command = lab.lab_command(ROOT, ["--no-browser"])
    assert command[:3] == [sys.executable, "-m", "jupyterlab"] and command[-1] == "--no-browser"
    settings = ROOT / lab.SETTINGS_DIR / "overrides.json"
    assert f"--LabApp.app_settings_dir={settings.parent}" in command
    viewers = json.loads(settings.read_text())["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers["markdown"] == viewers["myst"] == "Jupytext Notebook"
    # the viewer's name must be the one the installed jupytext extension registers
    bundles = glob.glob(f"{sys.prefix}/share/jupyter/labextensions/jupyterlab-jupytext/static/*.js")
    assert any('"Jupytext Notebook"' in Path(b).read_text(errors="replace") for b in bundles)


# ---------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, url: str, token: str):
        self.url, self.token = url, token
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"token {token}"

    def get(self, path: str, **params):
        r = self.http.get(f"{self.url}{path}", params=params, timeout=60)
        r.raise_for_status()
        return r.json()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab")
    port, token = free_port(), secrets.token_hex(16)
    env = lab.lab_env(ROOT, {**os.environ, "RESGD_MODE": "quick"})
    # The test's figures and results stay out of the repository; no Jupyter state of the user's.
    env.update(RESGD_FIGURES_DIR=str(tmp / "figures"), RESGD_RESULTS_DIR=str(tmp / "results"),
               JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"))
    command = lab.lab_command(ROOT, [
        "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
        f"--LabApp.user_settings_dir={tmp / 'user-settings'}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
    ])
    log = open(tmp / "server.log", "w+")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    client = Lab(f"http://127.0.0.1:{port}", token)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log.read()[-3000:]}")
            try:
                client.get("/api/status")
                break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer within {START_TIMEOUT_S} s")
                time.sleep(0.5)
        client.figures = tmp / "figures"
        yield client
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_markdown_notebook_opens_as_a_notebook(server):
    listing = server.get(f"/api/contents/{NOTEBOOK}", content=0)
    assert listing["type"] == "notebook", listing
    model = server.get(f"/api/contents/{NOTEBOOK}", type="notebook")
    nb = model["content"]
    assert model["format"] == "json" and nb["nbformat"] == 4
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    source = jupytext.read(ROOT / NOTEBOOK)
    assert [c["source"] for c in nb["cells"]] == [c.source for c in source.cells]
    assert any("parameters" in c["metadata"].get("tags", []) for c in nb["cells"])


def test_project_settings_are_in_effect(server):
    plugin = server.get("/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    assert plugin["schema"]["properties"]["defaultViewers"]["default"]["markdown"] == "Jupytext Notebook"


class Kernel:
    """A kernel of the server, driven over its websocket with the Jupyter messaging protocol."""

    def __init__(self, server: Lab, kernel_id: str):
        ws_url = server.url.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels"
        self.ws = websocket.create_connection(ws_url, header=[f"Authorization: token {server.token}"], timeout=CELL_TIMEOUT_S)
        self.session = uuid.uuid4().hex

    def run(self, code: str) -> tuple[str, list[dict]]:
        """Execute ``code``; (the reply's status, the iopub outputs)."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "session": self.session, "username": "test",
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        }))
        outputs, status, idle = [], None, False
        while status is None or not idle:
            msg = json.loads(self.ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if msg["channel"] == "shell" and kind == "execute_reply":
                status = msg["content"]["status"]
            elif kind == "status":
                idle = msg["content"]["execution_state"] == "idle"
            elif kind in ("stream", "display_data", "execute_result", "error"):
                outputs.append({"output_type": kind, **msg["content"]})
        return status, outputs


def text_of(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")


def test_01_setup_executes_in_the_project_kernel(server):
    session = server.http.post(f"{server.url}/api/sessions", json={
        "path": NOTEBOOK, "name": Path(NOTEBOOK).name, "type": "notebook", "kernel": {"name": "python3"},
    }, timeout=60)
    session.raise_for_status()
    session = session.json()
    kernel = Kernel(server, session["kernel"]["id"])
    try:
        status, outputs = kernel.run("import os, sys\nprint(sys.executable)\nprint(os.getcwd())\nprint(os.environ['RESGD_MODE'])")
        assert status == "ok", outputs
        assert text_of(outputs).split("\n")[:3] == [sys.executable, str(ROOT / "notebooks"), "quick"]
        cells = [c for c in server.get(f"/api/contents/{NOTEBOOK}", type="notebook")["content"]["cells"]
                 if c["cell_type"] == "code"]
        assert len(cells) >= 5
        images = 0
        for number, cell in enumerate(cells, start=1):
            status, outputs = kernel.run(cell["source"])
            errors = [f"{o['ename']}: {o['evalue']}" for o in outputs if o["output_type"] == "error"]
            assert status == "ok" and not errors, f"code cell {number} failed: {errors}"
            # a glued figure is a display_data whose mime type ends in image/png (myst-nb's glue)
            images += sum(any(m.endswith("image/png") for m in o.get("data", {})) for o in outputs)
        status, outputs = kernel.run("print(quick)")
        assert text_of(outputs).strip() == "True"  # the notebook ran its quick sizes
        assert images >= 1, "the glued figure was not sent as an image (inline backend?)"
        assert (server.figures / f"{figure_name('setup')}.png").is_file()
    finally:
        kernel.ws.close()
        server.http.delete(f"{server.url}/api/sessions/{session['id']}", timeout=60)


SHOTS = ROOT / "_build" / "screenshots"

NOTEBOOK_VIEW = """
const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
const tab = document.querySelector('.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel');
return {
  notebook: !!panel,
  codeCells: panel ? panel.querySelectorAll('.jp-CodeCell').length : 0,
  markdownCells: panel ? panel.querySelectorAll('.jp-MarkdownCell').length : 0,
  tab: tab ? tab.textContent : null,
  editors: document.querySelectorAll('.jp-FileEditor').length,
  kernel: (document.querySelector('.jp-Toolbar-kernelName') || {}).textContent || null,
};
"""


@pytest.mark.browser
def test_jupyterlab_opens_the_md_as_a_notebook(server):
    """What a student sees after ``make lab``: 01_setup.md open as a notebook, with its kernel."""
    from selenium.webdriver.support.ui import WebDriverWait

    from resgd.publish import browser

    if not browser.have_chromium():
        message = f"{browser.CHROMIUM} or {browser.CHROMEDRIVER} missing (make chromium)"
        if os.environ.get("RESGD_REQUIRE_SITE") == "1":
            pytest.fail(message + " and RESGD_REQUIRE_SITE=1")
        pytest.skip(message)
    source = jupytext.read(ROOT / NOTEBOOK)
    code = sum(c.cell_type == "code" for c in source.cells)
    with browser.chromium(timeout_s=180) as driver:
        driver.get(f"{server.url}/lab/tree/{NOTEBOOK}?token={server.token}")
        view = {}

        def settled(d):  # every cell rendered (markdown cells may come after the code cells) and the kernel up
            view.update(d.execute_script(NOTEBOOK_VIEW))
            return (view["codeCells"] == code and view["markdownCells"] == len(source.cells) - code
                    and (view["kernel"] or "").startswith("Python 3"))

        try:
            WebDriverWait(driver, 180, poll_frequency=1).until(settled)
        finally:
            SHOTS.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(SHOTS / "lab_01_setup.png"))
    assert view["notebook"] and view["tab"] == Path(NOTEBOOK).name and view["editors"] == 0, view
    assert view["markdownCells"] == len(source.cells) - code
