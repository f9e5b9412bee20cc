"""The paper's claims, one record each: every module that names, labels, draws, tests or words a
claim reads it here.

Why: a claim used to be spelled in a dozen modules (its name in the checks, the figures, the glue
keys, the sentences, the map's rows, the null simulation), so adding one meant finding them all.
To add a claim: add its :class:`Claim` to :data:`CLAIMS` here, and its check to
:data:`resgd.experiments.claims.CHECKS` (plus, if the claims' map tests it, the map's statistic in
:func:`resgd.robustness.verdicts.cell_effects`). ``tests/test_claim_registry.py`` fails when a
claim's name is written as a string anywhere else in ``src/``.

A record holds words and names only (no numbers, no code that computes), so no layer above is
imported and the cache key does not cover it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MapForm:
    """How the claims' map (chapter 6, :mod:`resgd.robustness.verdicts`) tests a claim in one cell:
    the name of its rows there and the words that show it."""

    name: str
    """The ``claim`` column of the map's cells."""
    label: str
    """The map's tables and texts (``robustness.verdicts.CLAIM_LABELS``)."""
    row_label: str
    """The phase diagram's row (two lines)."""
    short: str
    """The phase diagram's short tag: "(a)"."""
    explorer: str
    """The explorable map's description of the per-seed statistic."""
    twin: int = 0
    """Which of the grid's twins the model without residual is (``MapGrid.twins[twin]``)."""


@dataclass(frozen=True)
class Claim:
    """One claim: what it says, which figure shows it, which arm's runs decide it, and its words."""

    name: str
    """The verdict files' ``name``."""
    key: str
    """Its letter in glue keys (``<dataset>-<protocol>-<key>``), in ``decide-<key>`` figures and in
    the ladder's rule (:func:`resgd.experiments.decisions.simulate_rule`)."""
    label: str
    """"(a)", "(b)", "(c)"; "" for a claim that is ours, not the paper's."""
    text: str
    """The claim as the claims page states it (the verdicts' ``claim``)."""
    figure: str
    """Its curve figure's kind (``fig-<dataset>-<figure>``)."""
    experiment: str
    """The design's sweep whose runs decide it (:data:`resgd.experiments.design.ARMS`)."""
    decision_label: str
    """Its column in the verdict grid (two lines)."""
    decided_by: str
    """The statistic its decision figure plots, in words."""
    null_check: str
    """Its row in the null simulation (the stored chunks' ``check`` parameter: never change it)."""
    min_betas: int = 0
    """Checked in an arm only when the arm has this many values of β (a sensitivity arm with β ∈ {0, 1}
    checks (a), not (b))."""
    words: tuple[str, ...] = ()
    """The landing page's words for holds, fails, undecided[, horizon-dependent]."""
    speed_reading: str = ""
    """How design v6 reads it on the time to targets ('' when v6 does not test it)."""
    map_forms: tuple[MapForm, ...] = ()
    """Its forms in the claims' map, the deciding one first (none when the map does not test it)."""

    @property
    def decision_figure(self) -> str:
        """The kind of the figure of its deciding statistic."""
        return f"decide-{self.key}"


HORIZON = "depending on the horizon (T/4, T/2, T)"

RESIDUAL_HELPS = Claim(
    name="residual_helps", key="a", label="(a)",
    text="(a) A single-layer model with the residual connection (β = 1) trains faster than without (β = 0) (the paper: residual connections matter).",
    figure="residual", experiment="beta",
    decision_label="(a) residual\nfaster", decided_by="per-seed r(β = 1) − r(β = 0)",
    null_check="(a) residual helps",
    words=("faster than without it", "slower than without it", "not decidedly faster or slower than without it"),
    speed_reading="(a) the single-layer model with the residual (β = 1) reaches each target before the one without (β = 0)",
    map_forms=(MapForm("residual_helps", "(a) residual vs none", "(a) median log ratio\nΦ(T)/Φ(0) without / with", "(a)",
                       "(a) residual vs none, L = 1: per seed log(Φ(T)/Φ(0) without / with)"),),
)
BETA_MONOTONE = Claim(
    name="beta_monotone", key="b", label="(b)",
    text="(b) A larger residual weight β trains faster (paper's Fig. 3a).",
    figure="beta", experiment="beta",
    decision_label="(b) larger β\nfaster", decided_by="per-seed Spearman(β, r)",
    null_check="(b) larger β faster", min_betas=3,
    words=("ranks faster (each seed's rank correlation of β with the rate is above 0)",
           "ranks slower (each seed's rank correlation of β with the rate is below 0)",
           "is not decidedly faster or slower", f"ranks faster or not {HORIZON}"),
    speed_reading="(b) a larger β reaches each target sooner (per seed, the sign of Spearman(β, −iterations))",
    map_forms=(MapForm("beta_monotone", "(b) β ordering", "(b) median −Spearman\n(β, Φ(T)/Φ(0))", "(b)",
                       "(b) β ordering, L = 1: per seed −Spearman(β, Φ(T)/Φ(0))"),),
)
"""Its words read ranks (Spearman per seed), so a verdict says how β ranks the rates and the shape
clause after it says what the curve is (an inverted U "ranks slower" when its peak is at a small β;
it does not "train slower")."""
DEPTH_RESIDUAL_HELPS = Claim(
    name="depth_residual_helps", key="c", label="(c)",
    text="(c) At every depth L the model with residual connections trains faster than its twin without (paper's Fig. 3b).",
    figure="depth", experiment="depth",
    decision_label="(c) every\ndepth",
    decided_by="r(residual) − r(matched twin) per (L, seed) (dots); per-seed median over L (◆, decides)",
    null_check="(c) residual helps at depth",
    words=("faster", "slower", "undecided"),
    speed_reading="(c) the model with residuals reaches each target before its matched twin (per seed, the majority over L = 2, 6, 10)",
    map_forms=(MapForm("depth_residual_helps", "(c) residual vs none, L = 2, 6, 10", "(c) median over L of\nmedian log ratio", "(c)",
                       "(c) residual vs none at L = 2, 6, 10: per seed log ratio at each L; holds only when every depth's interval lies above 0"),
               MapForm("depth_residual_helps_second", "(c) against the second twin (MapGrid.twins[1])",
                       "(c), second twin:\nmedian over L of medians", "(c'')",
                       "(c) against the second twin: per seed log ratio at each L", twin=1)),
)
FACTORIAL = Claim(
    name="factorial", key="f", label="",
    text="Which skip carries the effect at L = 1: attention skip (β) × FFN skip (β_ffn) (ours, not the paper's).",
    figure="factorial", experiment="factorial",
    decision_label="factorial:\na skip speeds up", decided_by="per-seed mean effect of a skip on r",
    null_check="factorial: some skip speeds up",
)

CLAIMS = (RESIDUAL_HELPS, BETA_MONOTONE, DEPTH_RESIDUAL_HELPS, FACTORIAL)
"""Every claim, in the order the pages list them."""
BY_NAME = {c.name: c for c in CLAIMS}
MAP_FORMS = tuple(form for c in CLAIMS for form in c.map_forms)
"""The claims' map's rows, in order."""
MAP_CLAIMS = tuple(c for c in CLAIMS if c.map_forms)
"""The claims the map tests."""
SPEED_CLAIMS = tuple(c for c in CLAIMS if c.speed_reading)
"""The claims design v6 tests on the time to targets."""


def claim(name: str) -> Claim:
    """The claim called ``name`` (a KeyError names the known ones)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no claim {name!r}; the claims are {sorted(BY_NAME)}") from None


def names() -> frozenset[str]:
    """Every name a claim or a map form goes by (what no module outside this one spells)."""
    return frozenset(c.name for c in CLAIMS) | frozenset(f.name for f in MAP_FORMS)
