"""The results store: the full study's expensive results, in git, addressed by their bytes.

Why: the book's full design needs more gradient descent than CI can run. ``make results`` computes
it once (:mod:`resgd.study_store`) into ``store/``; the book reads it from there, and CI proves it
instead of recomputing it (``make verify``: checksums, every run's first iterations re-executed, a
seeded sample re-executed to its end, all bit for bit).

Layout (``store/`` of the checkout; ``$RESGD_STORE_DIR`` elsewhere)::

    manifest.json               format, the arithmetic, and one record per entry (key → record)
    objects/ab/abcdef….npz      an entry's table (:mod:`resgd.pipeline.frame_codec`), named by its SHA-256

An entry's key is :func:`resgd.experiments.configuration.entry_key` (what its numbers depend on besides
the code); its record names its kind, configuration and data (enough to compute it again), its
object and checksum, and the CPU-seconds it cost. Equal numbers give equal bytes and the same
object, so a refresh that reproduces the numbers changes nothing in git. Every object path in the
manifest is checked to be ``objects/<2 hex>/<64 hex>.npz`` inside the store before anything is
read: nothing outside the store is read or written because the manifest says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from .. import settings
from ..validation import ConfigError, DataError
from ..infra.atomic import write_bytes, write_text
from . import frame_codec

FORMAT = "resgd-store/1"
OBJECT_PATH = re.compile(r"^objects/([0-9a-f]{2})/([0-9a-f]{64})\.npz$")
MAX_OBJECT_BYTES = 64 << 20
"""No entry of the design comes near this (the largest run's table is under 1 MB): a larger file is
refused before it is read."""


class StoreError(DataError):
    """The store is damaged or not what this code computes (one line saying which file and what; exit 1)."""


class ArithmeticMismatch(ConfigError):
    """This process cannot compute the store's arithmetic (one line saying why; exit 2)."""


class StoreIncomplete(StoreError):
    """Results the book needs are not in the store, and ``RESGD_STORE=require`` forbids computing them."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def object_path(sha256: str) -> str:
    """An object's path inside the store, from its checksum."""
    return f"objects/{sha256[:2]}/{sha256}.npz"


class Store:
    """One store folder: its manifest in memory, objects read and written on demand."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.manifest_path = self.root / "manifest.json"
        self.entries: dict[str, dict[str, Any]] = {}
        self.arithmetic: dict[str, str] | None = None
        self.used: set[str] = set()
        self.filling = None
        """While ``make results`` fills the store: key → its description (kind, config, dtype, data);
        every result read from or written to the run cache then enters the store too."""
        if self.manifest_path.is_file():
            self._load()

    # ------------------------------------------------------------------ the manifest
    def _load(self) -> None:
        where = self.manifest_path
        try:
            manifest = json.loads(where.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoreError(f"{where}: not a readable manifest ({type(exc).__name__}: {exc}); "
                             f"restore it from git (git checkout -- {where}) or run `make results`") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise StoreError(f"{where}: field 'format' is {manifest.get('format') if isinstance(manifest, dict) else manifest!r}, "
                             f"expected {FORMAT!r}")
        entries = manifest.get("entries")
        if not isinstance(entries, dict):
            raise StoreError(f"{where}: field 'entries' must map each key to its record")
        for key, record in entries.items():
            self._check_record(key, record)
        self.entries = entries
        self.arithmetic = manifest.get("arithmetic")

    def _check_record(self, key: str, record: Any) -> None:
        where = f"{self.manifest_path}: entry {key!r}"
        if not re.fullmatch(r"[0-9a-f]{24}", key):
            raise StoreError(f"{where}: a key is 24 hex digits")
        if not isinstance(record, dict):
            raise StoreError(f"{where}: expected a record (object), got {type(record).__name__}")
        for field, kind in (("kind", str), ("object", str), ("sha256", str), ("bytes", int), ("config", dict),
                            ("dtype", str), ("data", str)):
            if not isinstance(record.get(field), kind):
                raise StoreError(f"{where}: field {field!r} must be a {kind.__name__}, got {record.get(field)!r}")
        match = OBJECT_PATH.match(record["object"])
        if match is None or match[2] != record["sha256"] or match[1] != record["sha256"][:2]:
            raise StoreError(f"{where}: field 'object' is {record['object']!r}; expected "
                             f"{object_path(record['sha256'])!r} (objects/<first 2 hex>/<sha256>.npz inside the store)")

    def save(self, arithmetic: dict[str, str]) -> Path:
        """Write the manifest atomically (sorted, one record per line group: small git diffs)."""
        self.arithmetic = dict(arithmetic)
        manifest = {"format": FORMAT, "arithmetic": self.arithmetic,
                    "entries": {k: self.entries[k] for k in sorted(self.entries)}}
        return write_text(self.manifest_path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    def digest(self) -> str:
        """SHA-256 of the manifest file as it is on disk (what the book's footer names); "" without one."""
        try:
            return _sha(self.manifest_path.read_bytes())
        except OSError:
            return ""

    # ------------------------------------------------------------------ objects
    def _object_file(self, record: dict[str, Any]) -> Path:
        path = self.root / record["object"]
        root = self.root.resolve()
        real = path.resolve()
        if root not in real.parents:
            raise StoreError(f"{path}: resolves to {real}, outside the store {root} (a link out of the store is not followed)")
        return path

    def read_bytes(self, key: str) -> bytes:
        """The object's bytes, checked against the manifest's checksum (StoreError otherwise)."""
        record = self.entries[key]
        path = self._object_file(record)
        try:
            size = path.stat().st_size
            if size > MAX_OBJECT_BYTES or size != record["bytes"]:
                raise StoreError(f"{path}: {size} bytes where the manifest records {record['bytes']} "
                                 f"(entry {key}); restore the store from git or run `make results`")
            data = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"{path}: missing (entry {key} of the manifest); restore the store from git "
                             f"(git checkout -- store) or run `make results`") from None
        if _sha(data) != record["sha256"]:
            raise StoreError(f"{path}: its content does not match its checksum (entry {key}): edited or damaged; "
                             f"restore it from git or run `make results`")
        return data

    def get(self, key: str) -> pd.DataFrame | None:
        """The table stored under ``key`` (checked), or None when the store has no such entry."""
        if key not in self.entries:
            return None
        data = self.read_bytes(key)
        try:
            frame = frame_codec.decode(data)
        except frame_codec.FrameFormatError as exc:
            raise StoreError(f"{self.root / self.entries[key]['object']}: {exc} (entry {key})") from None
        self.used.add(key)
        return frame

    def put(self, key: str, frame: pd.DataFrame, description: dict[str, Any], cpu_s: float | None = None) -> None:
        """Store ``frame`` under ``key``, described by ``description`` (kind, config, dtype, data) and
        what computing it cost (``cpu_s``; an entry whose numbers did not move keeps its record's)."""
        data = frame_codec.encode(frame)
        sha = _sha(data)
        path = self.root / object_path(sha)
        if not path.is_file():
            write_bytes(path, data)
        old = self.entries.get(key)
        record = {"kind": description["kind"], "config": description["config"], "dtype": description["dtype"],
                  "data": description["data"], "object": object_path(sha), "sha256": sha, "bytes": len(data)}
        if old is not None and old["sha256"] == sha:
            record["cpu_s"] = old.get("cpu_s")  # the same numbers: the record does not move either
        elif cpu_s is not None:
            record["cpu_s"] = round(float(cpu_s), 3)
        self.entries[key] = record
        self.used.add(key)

    def unreferenced_objects(self) -> list[Path]:
        """Object files no entry names (left by a refresh whose numbers moved)."""
        named = {self.root / r["object"] for r in self.entries.values()}
        folder = self.root / "objects"
        return sorted(p for p in folder.glob("*/*.npz") if p not in named) if folder.is_dir() else []


_ACTIVE: dict[str, Any] = {}


def active() -> Store | None:
    """This process's store as the settings name it (``$RESGD_STORE``, ``$RESGD_STORE_DIR``), loaded once
    (again when the manifest changes on disk); None when off or absent. (A process that does not run
    the store's arithmetic gets it too: its keys name another arithmetic and find nothing there.)"""
    if _ACTIVE.get("stamp") == "in use":
        return _ACTIVE["store"]
    if settings.store_mode() == "off":
        return None
    root = settings.store_dir()
    if root is None or not (root / "manifest.json").is_file():
        return None
    stat = (root / "manifest.json").stat()
    stamp = (str(root.resolve()), stat.st_mtime_ns, stat.st_size)
    if _ACTIVE.get("stamp") != stamp:
        _ACTIVE.update(stamp=stamp, store=Store(root))
    return _ACTIVE["store"]


def use(store: Store | None) -> None:
    """Make ``store`` this process's store (``make results`` fills one in memory); None: back to the settings."""
    _ACTIVE.clear()
    if store is not None:
        _ACTIVE.update(stamp="in use", store=store)


def switch_off() -> None:
    """This process computes every result instead of reading the store (a page's ``recompute`` parameter)."""
    os.environ["RESGD_STORE"] = "off"
    _ACTIVE.clear()


def read_so_far() -> tuple[int, float]:
    """How many entries this process has read from the store, and the CPU-seconds ``make results``
    recorded for computing them (what reading them saved)."""
    stored = active()
    if stored is None:
        return 0, 0.0
    return len(stored.used), float(sum(stored.entries[k].get("cpu_s") or 0.0 for k in stored.used if k in stored.entries))


def required() -> bool:
    """Whether a result missing from the store is an error (``RESGD_STORE=require``, CI)."""
    return settings.store_mode() == "require"


def check_complete(missing: int, total: int) -> None:
    """Raise :class:`StoreIncomplete` when the store is required and ``missing`` of ``total`` are not in it."""
    filling = _ACTIVE.get("stamp") == "in use" and _ACTIVE["store"].filling is not None
    if missing and required() and not filling:  # `make results` computes what is missing, whatever the setting
        from ..infra.arithmetic import why_not_pinned

        root = settings.store_dir()
        why = why_not_pinned()
        if root is None or not (root / "manifest.json").is_file():
            raise StoreIncomplete(f"RESGD_STORE=require, but there is no results store ({root or 'no checkout'}: "
                                  f"no manifest.json): run `make results`, or set RESGD_STORE_DIR")
        raise StoreIncomplete(
            f"the results store ({root}) lacks {missing} of the {total} results asked for, and RESGD_STORE=require "
            f"forbids computing them here: " + (f"{why}" if why else "run `make results` and commit store/"))
