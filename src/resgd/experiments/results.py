"""One data set's experiments once run: every run of the design and the tables read from them.

Why a module of its own: the pages, the figures (:mod:`resgd.experiments.figures`), the page's
tables (:mod:`resgd.experiments.page_tables`), its glued numbers (:mod:`resgd.experiments.page_numbers`)
and the files written (:mod:`resgd.experiments.result_files`) all read one :class:`ExperimentResults`;
:func:`resgd.experiments.study.run_experiments` makes it. The per-run table and the verdicts are
computed once per horizon and measure, on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..validation import check_choice
from .design import HORIZONS, MEASURES
from .experiment_settings import Settings
from .step_size import THEORY_PRIMARY
from .tables import per_run_table, summary_table

PRIMARY = f"theory c={THEORY_PRIMARY:g}"
"""The protocol label of the theorem's primary step (the one Theorem 1 speaks to)."""


@dataclass
class ExperimentResults:
    """Every run of one data set's experiments (all arms of :func:`resgd.experiments.design.arms`),
    and the tables the book shows."""

    settings: Settings
    data: dict[str, Any]
    lr: pd.DataFrame
    probes: pd.DataFrame
    runs: pd.DataFrame
    speed: Any = None
    """Design v6's runs and verdicts (:class:`resgd.experiments.speed.SpeedResults`); None where the
    settings have no v6 seeds (the toy data sets)."""
    _per_run_at: dict[float, pd.DataFrame] = field(default_factory=dict, repr=False)
    _verdicts_at: dict[tuple, list] = field(default_factory=dict, repr=False)
    _readout: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def is_standin(self) -> bool:
        return bool(self.data.get("is_standin", False))

    @property
    def source_label(self) -> str:
        return str(self.data.get("source_label", ""))

    def per_run(self, horizon: float = 1.0) -> pd.DataFrame:
        """One row per run (:func:`resgd.experiments.tables.per_run_table`), read at ``horizon`` · T."""
        if horizon not in self._per_run_at:
            self._per_run_at[horizon] = per_run_table(self.runs, horizon)
        return self._per_run_at[horizon]

    def summary(self) -> pd.DataFrame:
        return summary_table(self.per_run())

    def readout(self) -> pd.DataFrame:
        """Every distinct run's read-out prediction of Φ(T)/Φ(0) beside the measured one
        (:func:`resgd.experiments.readout_link.page_predictions`)."""
        if self._readout is None:
            from .readout_link import page_predictions

            self._readout = page_predictions(self.per_run(), self.settings)
        return self._readout

    def readout_link(self) -> pd.DataFrame:
        """The read-out link's Spearman ρ, run count, 5 % critical |ρ| and 80 %-power |ρ|: over all
        the page's runs, the single-layer runs and the depth sweep's."""
        from .readout_link import link_summary

        pred = self.readout()
        parts = {"all runs": pred, "single layer (β sweep, factorial)": pred[pred["experiment"] != "depth"],
                 "depth sweep": pred[pred["experiment"] == "depth"]}
        return pd.DataFrame([{"runs of": name, **link_summary(part)} for name, part in parts.items()])

    def verdicts(self, measure: str = "rate", horizons: Sequence[float] = HORIZONS):
        """Every claim's verdict on the pre-registered ``measure`` (``design.MEASURES``: the primary
        ``rate``, or ``rate_half`` or ``first_to_target`` replayed on the same runs to show where the
        measure matters), at every horizon of ``horizons`` and combined by
        :func:`resgd.experiments.claims.horizon_outcome`."""
        from .claims import evaluate_horizons

        check_choice("measure", measure, MEASURES)
        key = (measure, tuple(horizons))
        if key not in self._verdicts_at:
            self._verdicts_at[key] = evaluate_horizons({h: self._decided(h, measure) for h in horizons}, self.settings.dataset)
        return self._verdicts_at[key]

    def _decided(self, horizon: float, measure: str = "rate") -> pd.DataFrame:
        """The runs that enter verdicts (matched twins), with ``rate`` the chosen measure."""
        runs = self.per_run(horizon)
        return runs[runs["twin_init"] == "matched"].assign(rate=lambda t: t[measure])
