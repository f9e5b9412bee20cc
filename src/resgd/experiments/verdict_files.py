"""The verdicts as files and as the claims page's table: one data set's verdicts written as
``results/claims/<dataset>_<mode>.json`` and every data set's read back as one table, with the rule
that decided each, whether it decides (≥ 8 seeds) and the counts per protocol.

Why a module of its own: deciding a claim (:mod:`resgd.experiments.claims`) and keeping and reading
its verdict are separate ideas; pages 04/05 write these files and page 07 reads them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..claim_registry import FACTORIAL
from ..core.stats import interval_level
from ..dataset_registry import paper_names
from ..infra.atomic import json_text, write_json
from ..pipeline.cache import resolve_results_dir
from .claims import CLAIMS, FACTORIAL_RULE, NOTEBOOK, Verdict, _jsonable, horizon_name
from .design import MIN_COVERAGE, MIN_INTERVAL_SEEDS, VERDICTS
from ..words import agree


def verdicts_payload(verdicts: Sequence[Verdict], *, dataset: str, mode: str,
                     meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """One data set's verdicts as the JSON object of ``<dataset>_<mode>.json``."""
    import resgd

    return {"dataset": dataset, "mode": mode, "version": resgd.__version__, **_jsonable(meta or {}),
            "verdicts": [v.to_dict() for v in verdicts]}


def verdicts_writer(verdicts: Sequence[Verdict], **kwargs: Any) -> Callable[[Path], object]:
    """A writer of :func:`verdicts_payload` for a given (temporary) path, for publishing with other outputs."""
    text = json_text(verdicts_payload(verdicts, **kwargs))
    return lambda path: Path(path).write_text(text, encoding="utf-8")


def write_verdicts(verdicts: Sequence[Verdict], path: str | os.PathLike, *, dataset: str, mode: str,
                   meta: dict[str, Any] | None = None) -> Path:
    """Write one data set's verdicts to ``path`` as JSON, atomically."""
    return write_json(path, verdicts_payload(verdicts, dataset=dataset, mode=mode, meta=meta))


def rule_name(name: str, numbers: dict) -> str:
    """The rule that decided a verdict, as the tables name it: the factorial's :data:`FACTORIAL_RULE`,
    else ``interval`` or ``sign``."""
    if name == FACTORIAL.name:
        return FACTORIAL_RULE
    return "interval" if _interval_parts(numbers) else "sign"


def _interval_parts(numbers: dict) -> list[dict]:
    """The interval-rule results inside a verdict's numbers: the verdict's own, or its parts' (the
    factorial's per-skip intervals, shown beside its Holm sign test)."""
    parts = [numbers] + [v for v in numbers.values() if isinstance(v, dict)]
    return [p for p in parts if p.get("rule") == "interval"]


def interval_summary(verdicts: pd.DataFrame) -> dict[str, Any]:
    """The seeds and level of the checks decided by the interval rule (:data:`design.INTERVAL_ARMS`),
    and their chance of a decided outcome under no effect (1 − level), for the claims page's prose.
    An error when no check in ``verdicts`` used the interval (the page would have nothing to say)."""
    used = verdicts[verdicts["rule"] == "interval"]
    if used.empty:
        raise ValueError("claims.interval_summary: no verdict was decided by the interval rule")
    seeds = int(used["seeds"].min())
    level = interval_level(seeds, MIN_COVERAGE)  # the design's level: a check whose seeds dropped out has no interval
    return {"seeds": seeds, "level": level, "chance": 1.0 - level, "checks": int(len(used))}


def _skip_effects(numbers: dict) -> str:
    """The factorial's per-skip effects ('attention skip slows, FFN skip undecided'); '' for other checks.
    The verdict itself only says whether some skip speeds training up; this says what each one does."""
    if not isinstance(numbers.get("attention"), dict):
        return ""
    return ", ".join(f"{name} skip {numbers[key].get('effect', 'undecided')}"
                     for name, key in (("attention", "attention"), ("FFN", "ffn")) if isinstance(numbers.get(key), dict))


def _data_kind(payload: dict) -> str:
    """What a verdicts file was computed on: the synthetic stand-in, a real-format file the loaders
    were told not to check against the published one (:data:`resgd.data.NOT_CANONICAL_LABELS`), or
    verified real data."""
    from ..data import NOT_CANONICAL_LABELS

    if payload.get("is_standin"):
        return "synthetic stand-in"
    return "not canonical" if payload.get("source_label") in NOT_CANONICAL_LABELS else "real"


def _chance(numbers: dict) -> float:
    """The verdict's chance of a decided outcome under no effect (JSON writes non-finite floats as strings)."""
    return float(numbers.get("chance", "nan"))


def decides(numbers: dict) -> bool:
    """Whether a check enters the verdict table: its arm trained at least
    :data:`~resgd.experiments.design.MIN_INTERVAL_SEEDS` seeds (else it is descriptive)."""
    return int(numbers.get("arm_seeds", 0)) >= MIN_INTERVAL_SEEDS


def verdict_counts(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per protocol, over the deciding checks (``decides``): how many claims hold, fail, are
    horizon-dependent or undecided (of K checks), how many decided outcomes no effect at all would
    give in expectation (the sum of each check's chance); and how many checks are descriptive."""
    deciding = verdicts["decides"] if "decides" in verdicts.columns else pd.Series(True, index=verdicts.index)
    rows = []
    for protocol, g in verdicts.groupby("protocol", sort=False):
        counted = g[deciding[g.index]]
        rows.append({"protocol": protocol, "K": int(len(counted)),
                     **{v.replace("-", "_"): int((counted["verdict"] == v).sum()) for v in VERDICTS},
                     "decided_by_chance": float(counted["chance"].sum()), "descriptive": int(len(g) - len(counted))})
    return pd.DataFrame(rows)


COUNT_VERBS = {"holds": ("holds", "hold"), "fails": ("fails", "fail"), "horizon_dependent": ("is", "are"),
               "undecided": ("is", "are"), "descriptive": ("is", "are")}
"""The verb each count of :func:`verdict_counts` takes in the pages' sentences ("1 fails", "2 are undecided")."""


def count_words(row) -> dict[str, str]:
    """The words that agree with one protocol's counts (a row of :func:`verdict_counts`), for the pages
    to glue beside the counts: ``<column>-verb`` for each count (``holds-verb`` "holds" or "hold",
    ``undecided-verb`` "is" or "are"), ``K-checks`` ("check" or "checks"), ``K-decide`` and
    ``descriptive-checks`` ("check is" or "checks are").

    Why: the pages glued the counts next to fixed plural verbs, and a count of 1 read "1 are
    horizon-dependent"."""
    words = {f"{column}-verb": agree(row[column], *forms) for column, forms in COUNT_VERBS.items()}
    return {**words, "K-checks": agree(row["K"], "check"), "K-decide": agree(row["K"], "decides", "decide"),
            "descriptive-checks": agree(row["descriptive"], "check is", "checks are")}


def load_verdicts(directory: str | os.PathLike | None = None, mode: str = "quick",
                  datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """Every data set's verdicts as one table (rows: claim × data set × protocol), from
    ``<directory>/<dataset>_<mode>.json`` (default directory: ``<results dir>/claims``; default data
    sets: the paper's).

    A missing file is an error that names it and the notebook that writes it.
    """
    folder = Path(directory) if directory is not None else resolve_results_dir() / "claims"
    rows = []
    for dataset in paper_names() if datasets is None else datasets:
        path = folder / f"{dataset}_{mode}.json"
        if not path.is_file():
            notebook = NOTEBOOK.get(dataset, dataset)
            raise FileNotFoundError(
                f"{path} is missing: run notebooks/{notebook}.md in {mode} mode first "
                f"(or `python -m resgd reproduce{' --quick' if mode == 'quick' else ''} --only {dataset}`)"
            )
        payload = json.loads(path.read_text(encoding="utf-8"))
        for item in payload["verdicts"]:
            v = Verdict.from_dict(item)
            rows.append({
                "claim": v.claim, "name": v.name, "dataset": payload.get("dataset", dataset),
                "data": _data_kind(payload), "source": str(payload.get("source_label", "")),
                "protocol": v.protocol, "figure": v.figure, "notebook": NOTEBOOK.get(dataset, dataset),
                "verdict": v.outcome, "chance": _chance(v.numbers), "decides": decides(v.numbers),
                "seeds_in_arm": int(v.numbers.get("arm_seeds", 0)),
                "horizons": ", ".join(f"{horizon_name(float(h))} {o}" for h, o in v.numbers.get("horizons", {}).items()),
                "out_of_regime": int(v.numbers.get("runs_out_of_regime", 0)),
                "shape": str(v.numbers.get("shape", "")),
                "rule": rule_name(v.name, v.numbers),
                "skips": _skip_effects(v.numbers),
                "seeds": min((int(q["seeds"]) for q in _interval_parts(v.numbers)), default=None),
                "level": min((float(q["level"]) for q in _interval_parts(v.numbers)), default=None),
                "numbers": v.detail, "mode": payload.get("mode", mode),
            })
    order = {name: i for i, name in enumerate(CLAIMS)}
    table = pd.DataFrame(rows)
    return table.sort_values(by=["name", "dataset", "protocol"], key=lambda col: col.map(order) if col.name == "name" else col,
                             ignore_index=True)
