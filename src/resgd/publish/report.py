"""The execution report: one :class:`Record` per notebook (how long, whether it ran to the end, on
which engine path), written as ``_build/execution_report.json`` into the book build's build
(:mod:`resgd.publish.book_outputs`) and rendered as the book's page ``book/execution.md`` (:mod:`resgd.publish.sphinx_ext`).

Why a module of its own: the report is the build's one lasting account of what ran, read by the
book's execution page and by the next build (which keeps the records of notebooks it does not
rerun); its format is independent of how notebooks are scheduled or executed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

from ..infra.atomic import write_text
from .environment import MODE_ENV

REPORT = Path("_build") / "execution_report.json"


@dataclass
class Record:
    notebook: str
    mode: str
    seconds: float
    ok: bool
    error: str | None = None
    engine: str = ""
    """How the notebook's steps were computed (:class:`EngineProbe`): engine version, MKL path, ISA, torch."""


_ENGINE_CODE = ("from resgd.core.engine import engine_path; p = engine_path(); "
                "print(', '.join(f'{k}={p[k]}' for k in ('engine', 'mkl_path', 'isa', 'torch')))")


class EngineProbe:
    """The engine path (:func:`resgd.core.engine.engine_path`) of a process started with the notebooks'
    environment, as one line (the reason when it cannot be asked): asked in a process started now and
    read by calling the object, so its start-up (torch's import, seconds) overlaps the first
    notebooks' instead of delaying them; :meth:`stop` ends it when the build is interrupted. Asked
    once per process and environment (the folders and the mode do not change the engine)."""

    _known: dict[frozenset, str] = {}
    PER_BUILD = ("RESGD_FIGURES_DIR", "RESGD_RESULTS_DIR", "RESGD_BOOK_WORKSPACE", MODE_ENV)

    def __init__(self, env: Mapping[str, str]):
        self.key = frozenset((k, v) for k, v in env.items() if k not in self.PER_BUILD)
        self.answer: str | None = self._known.get(self.key)
        self.proc = None
        if self.answer is not None:
            return
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _ENGINE_CODE], env=dict(env), stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
        except OSError as exc:
            self.proc, self.answer = None, f"unknown ({exc})"

    def __call__(self) -> str:
        if self.answer is None:
            try:
                out, _ = self.proc.communicate(timeout=300)
            except subprocess.TimeoutExpired as exc:
                self.stop()
                self.answer = f"unknown ({exc})"
            else:
                lines = out.strip().splitlines()
                self.answer = lines[-1] if self.proc.returncode == 0 and lines else "unknown"
                if self.answer != "unknown":
                    self._known[self.key] = self.answer
        return self.answer

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def write_report(path: Path, records: Sequence[Record], mode: str, total: float, jobs: int = 1) -> None:
    """Write the execution report atomically (:mod:`resgd.infra.atomic`); ``jobs``: notebooks run at a time."""
    report = {
        "mode": mode,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "total_seconds": round(total, 2),
        "jobs": int(jobs),
        "ok": all(r.ok for r in records),
        "notebooks": [asdict(r) for r in records],
    }
    write_text(path, json.dumps(report, indent=2) + "\n")


def read_report(path: Path) -> list[Record]:
    """The records of an earlier report ([] when there is none or it cannot be read)."""
    try:
        return [Record(**r) for r in json.loads(path.read_text(encoding="utf8"))["notebooks"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []
