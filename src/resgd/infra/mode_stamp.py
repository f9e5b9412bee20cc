"""Which mode (quick or full) the outputs in a folder come from, so one cannot silently replace the other.

Why: figures and tables of both modes have the same names and carry no mode, so a ``--quick`` run
overwrote full-mode figures without a word. Every run that writes a figures or results folder first
:func:`claim`\\ s it: the first run stamps it (``<folder>/.resgd-mode``, created exclusively, so of
two first runs one stamps and the other reads that stamp); a run of the other mode, or a folder whose
stamp is damaged, is refused in one line before any work, naming the folder and what to do.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..validation import OutputError
from .atomic import current_umask

STAMP = ".resgd-mode"
MODES = ("quick", "full")


def stamped_mode(folder: str | os.PathLike) -> str | None:
    """The mode stamped on ``folder``, or None when it has no stamp. A stamp that is not a mode (a
    damaged file) is an :class:`OutputError`: read as "no stamp", it would let either mode overwrite."""
    path = Path(folder) / STAMP
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutputError(f"{path}: the folder's mode stamp cannot be read ({exc.strerror or exc}); nothing was computed") from None
    text = raw.decode("utf-8", errors="replace").strip()
    if text not in MODES:
        raise OutputError(
            f"{path} holds {text[:40]!r}, not one of {', '.join(MODES)}: the stamp is damaged, so which mode "
            f"{Path(folder)}'s outputs come from is unknown; delete {path} if they come from this run's mode "
            f"(or delete {Path(folder)}), then run again; nothing was computed")
    return text


def _stamp_exclusively(folder: Path, mode: str) -> None:
    """Create the stamp complete and only if none exists (a hard link of a finished temporary file
    fails when the name exists): two first runs cannot both stamp. Its mode is the umask's, as any
    file's (mkstemp's 0600 kept a group sharing the folder from reading it)."""
    fd, tmp = tempfile.mkstemp(prefix=".resgd-mode-", dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(f"{mode}\n".encode())
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, folder / STAMP)
        except FileExistsError:
            pass  # another first run stamped first: the caller reads its stamp
    finally:
        os.unlink(tmp)


def claim(folder: str | os.PathLike, mode: str, *, how_to_move: str) -> None:
    """Stamp ``folder`` with ``mode``; :class:`OutputError` when it holds outputs of the other mode.

    ``how_to_move``: how the caller writes elsewhere (a flag or variable)."""
    if mode not in MODES:
        raise OutputError(f"mode stamp: expected one of {', '.join(MODES)}, got {mode!r}")
    folder = Path(folder)
    found = stamped_mode(folder)
    if found is None:
        folder.mkdir(parents=True, exist_ok=True)
        _stamp_exclusively(folder, mode)
        found = stamped_mode(folder)
    if found != mode:
        raise OutputError(
            f"{folder} holds {found}-mode outputs (stamped in {folder / STAMP}); a {mode} run would overwrite "
            f"them with outputs of another size under the same names: write the {mode} run elsewhere "
            f"({how_to_move}), or delete {folder} (or its {STAMP}) to replace them; nothing was computed"
        )
