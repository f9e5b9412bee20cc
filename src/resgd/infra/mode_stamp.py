"""Which mode (quick or full) the outputs in a folder come from, so one cannot silently replace the other.

Why: figures and tables of both modes have the same names and carry no mode, so a ``--quick`` run
overwrote full-mode figures without a word. Every run that writes a figures or results folder first
:func:`claim`\\ s it: the first run stamps it (``<folder>/.resgd-mode``); a run of the other mode is
refused in one line before any work, naming the folder and what to do.
"""

from __future__ import annotations

import os
from pathlib import Path

from .atomic import write_bytes
from ..validation import OutputError

STAMP = ".resgd-mode"


def stamped_mode(folder: str | os.PathLike) -> str | None:
    """The mode stamped on ``folder``, or None when it has none."""
    try:
        return (Path(folder) / STAMP).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def claim(folder: str | os.PathLike, mode: str, *, how_to_move: str) -> None:
    """Stamp ``folder`` with ``mode``; :class:`OutputError` when it holds outputs of the other mode.

    ``how_to_move``: how the caller writes elsewhere (a flag or variable)."""
    folder = Path(folder)
    found = stamped_mode(folder)
    if found is not None and found != mode:
        raise OutputError(
            f"{folder} holds {found}-mode outputs (stamped in {folder / STAMP}); a {mode} run would overwrite "
            f"them with outputs of another size under the same names: write the {mode} run elsewhere "
            f"({how_to_move}), or delete {folder} (or its {STAMP}) to replace them; nothing was computed"
        )
    if found is None:
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes(folder / STAMP, f"{mode}\n".encode())
