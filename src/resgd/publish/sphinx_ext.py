"""The book's own Sphinx extension (``_config.yml``: ``sphinx: extra_extensions``), so that a reader
can trust a page at a glance:

* every HTML page's footer says which build made it: git commit, date (UTC), quick/full mode (from
  ``_build/execution_report.json``, :mod:`resgd.publish.build`) and the key packages' versions;
* the © year is the build's year, not a year typed into ``_config.yml``;
* ``book/execution.md`` (git-ignored) is the execution report as a page, rewritten from the JSON at
  each build, so it cannot disagree with it (a missing report gives a page that says so);
* a figure's image whose alt text is only its file path (myst-nb's glued figures) gets its
  caption's text instead, which says what the figure shows;
* the repository, issues and launch (Binder) buttons appear only when ``_config.yml`` names the
  source's repository (``repository.url``, :func:`repository_buttons`): each points into it.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

PACKAGES = ("resgd", "torch", "numpy", "jupyter-book")
REPORT = Path("_build") / "execution_report.json"
EXECUTION_DOC = "book/execution"
STANDARD_COLUMNS = ("notebook", "mode", "seconds", "ok")


def build_time(environ: Mapping[str, str] | None = None) -> datetime:
    """Now in UTC, or ``$SOURCE_DATE_EPOCH`` (reproducible builds) when set."""
    epoch = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH")
    if epoch and epoch.strip().isdigit():
        return datetime.fromtimestamp(int(epoch), timezone.utc)
    return datetime.now(timezone.utc)


def git_commit(root: Path) -> str:
    """The short commit of ``root``'s checkout, ``+dirty`` when tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20,
                              check=True).stdout.strip()
    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return commit + ("+dirty" if dirty else "")


def read_report(root: Path, path: Path | None = None) -> dict | None:
    """The execution report as written by :func:`resgd.publish.report.write_report` (at ``path``,
    default the book's), None if unreadable."""
    try:
        report = json.loads((path or root / REPORT).read_text(encoding="utf8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def report_mode(report: dict | None) -> str:
    """The mode the published notebooks ran in ("quick", "full", "quick+full" after mixed runs)."""
    if not report:
        return "unknown (no execution report)"
    modes = sorted({str(r.get("mode")) for r in report.get("notebooks", []) if isinstance(r, dict) and r.get("mode")})
    return "+".join(modes) if modes else str(report.get("mode", "unknown"))


def versions(packages=PACKAGES) -> dict[str, str]:
    out = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def provenance(root: Path, when: datetime | None = None) -> dict[str, Any]:
    """What made this build: commit, date (UTC), mode and package versions."""
    when = when or build_time()
    return dict(commit=git_commit(root), date=when.strftime("%Y-%m-%d %H:%M UTC"), year=when.year,
                mode=report_mode(read_report(root)), versions=versions(), store=store_sha(root)[:12])


def store_sha(root: Path) -> str:
    """SHA-256 of the manifest of the results store the notebooks read (``$RESGD_STORE_DIR``, else
    ``root``'s ``store/``); "" without one."""
    import hashlib

    from .. import settings

    folder = settings.store_dir() if os.environ.get("RESGD_STORE_DIR") else root / "store"
    try:
        return hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()
    except OSError:
        return ""


def provenance_html(info: Mapping[str, Any], report_url: str | None = None) -> str:
    """The footer line; ``report_url`` links the mode to the execution report page."""
    mode = html.escape(str(info["mode"]))
    if report_url:
        mode = f'<a href="{html.escape(report_url)}">{mode}</a>'
    packages = ", ".join(f"{html.escape(k)} {html.escape(v)}" for k, v in info["versions"].items())
    store = (f', results store <code>{html.escape(info["store"])}</code>' if info.get("store") else "")
    return (f'<p class="resgd-provenance">Built {html.escape(info["date"])} from commit '
            f'<code>{html.escape(info["commit"])}</code>{store}, {mode} mode; {packages}.</p>')


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "✓" if value else "✗ **failed**"
    if isinstance(value, float):
        return f"{value:.1f}"
    text = "" if value is None else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def _jobs_text(report: dict, records: list[dict]) -> str:
    """' (up to 2 notebooks at a time: the rows' seconds add up to 2190.0)' when notebooks overlapped."""
    jobs = report.get("jobs")
    if not isinstance(jobs, int) or jobs < 2:
        return ""
    summed = sum(float(r.get("seconds") or 0) for r in records)
    return f" (up to {jobs} notebooks at a time, so the rows' seconds add up to {summed:.1f})"


def execution_markdown(report: dict | None) -> str:
    """The execution report page: one row per notebook and a column for every key its records have
    (``error`` goes below the table, being long)."""
    head = ("# Execution report\n\nHow the notebooks published in this book were executed: written from "
            "`_build/execution_report.json` (by `python -m resgd.publish.build`) when the book was built.\n\n")
    if not report or not isinstance(report.get("notebooks"), list):
        return head + ("**No execution report was found when this book was built**: its notebook pages were not "
                       "executed by `python -m resgd.publish.build` in this checkout (see *Reproduce this book*).\n")
    records = [r for r in report["notebooks"] if isinstance(r, dict)]
    columns = list(STANDARD_COLUMNS)
    for r in records:
        columns += [k for k in r if k not in columns and k != "error"]
    lines = [f"Mode: **{_cell(report.get('mode'))}**; finished {_cell(report.get('finished'))}; "
             f"{_cell(float(report.get('total_seconds') or 0))} s of wall time in all"
             f"{_jobs_text(report, records)}; "
             f"{'every notebook ran to the end' if report.get('ok') else 'at least one notebook **failed**'}.", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in records]
    errors = [(r.get("notebook"), r["error"]) for r in records if r.get("error")]
    if errors:
        lines += ["", "## Failures", ""]
        for name, error in errors:
            lines += [f"`{name}`:", "", "```text", str(error), "```", ""]
    return head + "\n".join(lines) + "\n"


def read_verification(root: Path) -> dict | None:
    """``<results>/verification.json`` (what ``make verify`` proved of the store), None when absent or unreadable."""
    from .. import settings

    results = settings.results_dir()
    path = (results if results.is_absolute() else root / results) / "verification.json"
    try:
        report = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def store_markdown(verification: dict | None, digest: str, commit: str = "") -> str:
    """The execution report's section on the results store: which store this build rendered from and
    what ``make verify`` re-executed of it (only a verification of this very manifest, by this very
    commit's code when ``commit`` is given, counts)."""
    head = "\n## The results store\n\n"
    if not digest:
        return head + "This checkout has no results store (`store/manifest.json`): every result was computed in this build.\n"
    where = (f"The pages 4, 5 and 6 read their training runs and $\\hat L$ from the results store `store/` "
             f"(manifest SHA-256 `{digest[:12]}`; see *Reproduce this book*). ")
    if not verification or verification.get("manifest_sha256", "")[:12] != digest[:12]:
        return head + where + ("**This build did not verify it** (no `make verify` of this manifest was found): "
                               "run `make verify` before `make book`, as CI does.\n")
    clean = commit.removesuffix("+dirty")
    if commit and (commit != clean or not str(verification.get("commit", "")).startswith(clean)):
        return head + where + (f"**This build did not verify it**: the last `make verify` of this manifest ran with "
                               f"the code of commit `{str(verification.get('commit', '?'))[:12]}`, this build's code is "
                               f"`{commit}`. Run `make verify` before `make book`, as CI does.\n")
    failures = verification.get("failures") or {}
    sample = verification.get("sample") or []
    share = verification.get("sample_share_of_store_cpu")
    lines = [where + (f"Before this build, `make verify` proved it on {_cell(verification.get('cpu'))}: "
                      f"{verification.get('entries')} entries' checksums and keys checked; "
                      f"{verification.get('runs')} runs re-executed for their first "
                      f"{verification.get('first_iterations')} iterations; {len(sample)} entries (one of each shape, "
                      f"drawn with seed `{str(verification.get('sample_seed'))[:12]}`) re-executed to their end"
                      + (f", {100 * share:.1f} % of the store's recorded CPU time" if isinstance(share, (int, float)) else "")
                      + f"; all compared bit for bit, in {_cell(float(verification.get('cpu_s') or 0))} CPU-s. "
                      + ("**Every entry is what this code computes.**" if verification.get("ok") else
                         "**The store failed verification**: " + ", ".join(f"{v} by {k}" for k, v in failures.items() if v) + ".")),
             "", "| entry re-executed to its end |", "|---|"]
    lines += [f"| {_cell(entry)} |" for entry in sample]
    arithmetic = verification.get("arithmetic") or {}
    lines += ["", "Arithmetic: " + ", ".join(f"`{k}={v}`" for k, v in arithmetic.items()) + "."]
    return head + "\n".join(lines) + "\n"


def execution_page(root: Path, report: Path | None = None) -> str:
    """The text of ``book/execution.md`` for the report at ``report`` (default the book's): the book
    build writes it into its build (:mod:`resgd.publish.book_outputs`)."""
    return execution_markdown(read_report(root, report)) + store_markdown(read_verification(root), store_sha(root),
                                                                          git_commit(root))


def write_execution_page(root: Path) -> Path:
    """Write ``book/execution.md`` from the report, only when its text changes (Sphinx re-reads it then).
    Atomically: the page is a link into the book's current build, whose file the next build shares
    (a hard link); a changed page replaces the link, and the next book build links it again."""
    from ..infra.atomic import write_text

    path = root / f"{EXECUTION_DOC}.md"
    text = execution_page(root)
    if not path.is_file() or path.read_text(encoding="utf8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
    return path


GREEK = {name: chr(code) for name, code in (
    ("alpha", 0x3B1), ("beta", 0x3B2), ("gamma", 0x3B3), ("delta", 0x3B4), ("epsilon", 0x3B5), ("eta", 0x3B7),
    ("theta", 0x3B8), ("kappa", 0x3BA), ("lambda", 0x3BB), ("mu", 0x3BC), ("rho", 0x3C1), ("sigma", 0x3C3),
    ("tau", 0x3C4), ("phi", 0x3C6), ("psi", 0x3C8), ("omega", 0x3C9), ("Phi", 0x3A6), ("Sigma", 0x3A3),
    ("Theta", 0x398), ("Delta", 0x394), ("Omega", 0x3A9), ("Lambda", 0x39B))}
TEX_SYMBOLS = {"le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "times": "×", "cdot": "·", "to": "→", "infty": "∞",
               "approx": "≈", "ne": "≠", "neq": "≠", "pm": "±", "in": "∈", "ell": "ℓ", "min": "min", "max": "max",
               "log": "log", "exp": "exp", "top": "ᵀ", "quad": " ", ",": " ", ";": " ", "!": ""}


def tex_to_text(tex: str) -> str:
    """Inline TeX as plain text for alt attributes (σ_min(Z), β = 1): a screen reader or a search
    index reads no MathJax."""
    import re

    def command(match):
        name = match.group(1)
        return GREEK.get(name, TEX_SYMBOLS.get(name, name))
    accents = {"hat": "\u0302", "bar": "\u0304", "tilde": "\u0303"}
    text = re.sub(r"\\(hat|bar|tilde)\s*\{?\s*([A-Za-z])\s*\}?", lambda m: m.group(2) + accents[m.group(1)], tex)
    text = re.sub(r"\\(?:mathrm|mathbf|mathcal|text|operatorname|hat|bar|tilde)\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\([A-Za-z]+|[,;!])", command, text)
    text = re.sub(r"([_^])\{([^{}]*)\}", r"\1\2", text)
    text = text.replace("\\{", "{").replace("\\}", "}").replace("{", "").replace("}", "").replace("\\", "")
    return " ".join(text.split())


def plain_text(node) -> str:
    """A node's text with its mathematics as :func:`tex_to_text`."""
    from docutils import nodes

    parts = []
    for child in node.findall(lambda n: isinstance(n, (nodes.Text, nodes.math))):
        if isinstance(child, nodes.math):
            parts.append(tex_to_text(child.astext()))
        elif not any(isinstance(p, nodes.math) for p in _ancestors(child)):
            parts.append(str(child))
    return " ".join("".join(parts).split())


def _ancestors(node):
    while node.parent is not None:
        node = node.parent
        yield node


def _is_path(alt: str, uri: str) -> bool:
    alt = (alt or "").strip()
    return not alt or alt == uri or "/" in alt and " " not in alt or alt.lower().endswith((".png", ".svg", ".jpg", ".jpeg"))


def caption_alt_texts(doctree) -> int:
    """Give each figure's images whose alt is empty or a file path the caption's plain text;
    returns how many were set."""
    from docutils import nodes

    changed = 0
    for figure in doctree.findall(nodes.figure):
        captions = list(figure.findall(nodes.caption))
        if not captions:
            continue
        text = plain_text(captions[0])
        for image in figure.findall(nodes.image):
            if _is_path(image.get("alt", ""), image.get("uri", "")):
                image["alt"] = text
                changed += 1
    return changed


LAUNCH_URLS = ("binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url", "jupyterlite_url")


def repository_buttons(options: Mapping[str, Any]) -> dict[str, Any]:
    """The theme's options with the repository, issues and launch buttons on only when a repository is
    named (``repository.url`` of ``_config.yml``, the one setting): without one, each would lead the
    reader to an address that does not exist."""
    named = bool(str(options.get("repository_url") or "").strip())
    launch = dict(options.get("launch_buttons") or {})
    if not named:
        launch.update({key: "" for key in LAUNCH_URLS if key in launch})
    return {**options, "use_repository_button": named, "use_issues_button": named, "launch_buttons": launch}


def _config_inited(app, config) -> None:
    config.html_theme_options = repository_buttons(config.html_theme_options or {})
    root = Path(app.srcdir)
    info = provenance(root)
    app.env_provenance = info  # for the pages' footers
    author = str(config.author or "").strip()
    config.copyright = f"{info['year']}, {author}" if author else str(info["year"])
    write_execution_page(root)


def unique_scripts(scripts: list) -> list:
    """The page's scripts with repeats removed (first kept). Why: an inline script that sphinx-thebe or
    sphinx-togglebutton adds after the builder started reaches the page twice, once with no file name
    (None) and once with an empty one, which Sphinx's own check for repeats tells apart; a second
    ``const THEBE_JS_URL`` is a console error on every page."""
    seen, out = set(), []
    for js in scripts:
        key = (str(getattr(js, "filename", js) or ""), tuple(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            out.append(js)
    return out


THEME_MODE = "light"
"""The theme's colour mode on a first visit: the captions' and the footer's colours (_static/resgd.css)
are chosen for it. Unset, pydata-sphinx-theme starts from an empty mode and logs "Got invalid theme
mode" as a console error on every reader's first page."""


def _page_context(app, pagename, templatename, context, doctree) -> None:
    if "script_files" in context:
        context["script_files"] = unique_scripts(list(context["script_files"]))
    if not context.get("default_mode"):
        context["default_mode"] = THEME_MODE
    info = getattr(app, "env_provenance", None)
    if info is None:
        return
    pathto = context.get("pathto")
    url = pathto(EXECUTION_DOC) if pathto and EXECUTION_DOC in app.env.found_docs else None
    footer = context.get("theme_extra_footer") or ""
    context["theme_extra_footer"] = footer + provenance_html(info, url)
    if "body" in context:
        context["body"] = quick_banner_html(info["mode"]) + context["body"]


def quick_banner_html(mode: str) -> str:
    """At the top of every page of a build whose notebooks ran in quick mode (or in both modes): what
    a reader must know before any number on it; "" for a full build."""
    if "quick" not in str(mode):
        return ""
    return ('<div class="resgd-quick-banner" role="note"><strong>Quick build (a smoke build).</strong> The '
            'notebooks of this build ran at the tiny quick sizes, to run every code path in minutes: its numbers '
            'and verdicts are not the published book\'s. <code>make book</code> builds the full book from the '
            'results store.</div>')


def _doctree_resolved(app, doctree, docname) -> None:
    caption_alt_texts(doctree)


def setup(app):
    app.connect("config-inited", _config_inited, priority=400)  # before sphinx-external-toc reads the TOC
    app.connect("html-page-context", _page_context)
    app.connect("doctree-resolved", _doctree_resolved)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
