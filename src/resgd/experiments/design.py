"""The pre-registered design of the experiment pages (issue 21): which runs, which measures,
which verdict rules. Fixed in code and committed before the first run of this design; the book
shows that commit (``book/choices.md``). Nothing here may be changed to make a claim pass.

Arms (one :class:`Arm` per group of runs that share protocol, step factor and twin init):

* ``beta`` — L = 1, every β of ``Settings.betas``, under ``common`` and ``theory`` c = 0.5; the
  theory factors c = 0.25 and 1 at β ∈ {0, 1} only (a sensitivity check of the step);
* ``factorial`` — L = 1, attention skip × FFN skip, (β, β_ffn) ∈ {0, 1}², under ``theory`` c = 0.5;
* seeds: the two arms where the theorem's protocol decides at L = 1 (``beta`` and ``factorial``
  under ``theory`` c = 0.5, :data:`INTERVAL_ARMS`) train ``Settings.interval_seeds`` seeds (8 in
  quick and full mode; the first ones are the other arms' seeds); every other arm
  ``Settings.seeds`` (3 in full mode, 2 in quick mode), the dead-by-init twin one;
* ``depth`` — every L of ``Settings.depths``, the residual model (β = 1) and its living twin
  (β = 0, ``twin_init="living"``) under ``common`` and ``theory`` c = 0.5; the dead-by-init twin
  (``twin_init="scaled"``) under ``common``, first seed only, shown and labelled, never in a verdict.

Measures (per run; :func:`resgd.experiments.tables.per_run_table`):

* primary: the linear rate, minus the least-squares slope of log Φ(t) over t ∈ [0, T/2]
  (:data:`RATE_WINDOW`), a speed that does not depend on the starting loss;
* secondary speed: iterations to Φ(t) ≤ :data:`RELATIVE_TARGET` · Φ(0) (+∞ if never);
* outcome: ``diverged`` (the trainer's rule), ``stalled`` (Φ(T)/Φ(0) ≥ :data:`STALL_RATIO`: it
  did not learn), ``learning`` otherwise. A stalled run is never called diverged nor stable;
* loss at T and Φ(T)/Φ(0): shown, never deciding a verdict.

Verdict rules (:mod:`resgd.experiments.claims`), per data set and protocol, on the primary rate.
In the :data:`INTERVAL_ARMS` (``rule = "interval"``; the same rule as the robustness map's):

* a per-seed statistic, oriented so that > 0 is the paper's direction: (a) d = rate(β = 1) −
  rate(β = 0); (b) ρ_s = Spearman(β, rate of seed s) over the five β (a diverged run ranks last);
  factorial, per skip, the mean of its two differences (at both levels of the other skip);
* the exact order-statistic interval for the median of the per-seed values
  (:func:`resgd.core.stats.median_interval` at :data:`MIN_COVERAGE`: with 8 seeds
  [x₍₂₎, x₍₇₎], level 93.0 %); **holds** (a skip **speeds up**) when the interval lies above 0,
  **fails** (**slows**) when below, **undecided** otherwise. Under no effect a "holds" arises by
  chance with probability ≤ (1 − level)/2 = 3.5 %, a decided outcome ≤ 7 %. Fewer than
  :data:`MIN_INTERVAL_SEEDS` seeds in such an arm is an error, not a weaker verdict.

In every other arm (3 seeds in full mode: ``common``, the sensitivity factors, the depth sweep):

* (a) and (c) at each L — paired by seed, d = rate(β = 1) − rate(twin): **holds** when d > 0 for
  every seed, **fails** when d < 0 for every seed, **undecided** otherwise (ties included). With n
  seeds, all n agreeing by chance under no effect has probability 2·2⁻ⁿ (the exact two-sided
  sign test; 0.5 for n = 2, 0.25 for n = 3): no verdict here is a significance claim, the page says so.
  (c) holds when it holds at every L, fails when it fails at some L, else undecided;
* (b) — Spearman ρ between β and the median rate over seeds: **holds** when ρ ≥
  :data:`SPEARMAN_BOUND`, **fails** when ρ ≤ −:data:`SPEARMAN_BOUND`, undecided otherwise;
* factorial — each skip's effect at both levels of the other, paired by seed: the skip
  **speeds up** training when all 2n differences are > 0, **slows** it when all are < 0, else
  undecided. Theorem 1's α carries β_ffn² (the FFN skip), its σ_min(Z) the attention skip.

Which protocol the theorem speaks to: ``theory`` (μ = c / L̂(θ⁰ of each seed), the step of its
guarantee). Claim (c) under it stays at 3 seeds here (the sign rule, chance 0.25 per depth): the
8-seed verdicts at L = 2, 6, 10 are the robustness map's (``notebooks/07_robustness``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .step_size import THEORY_PRIMARY

RATE_WINDOW = (0.0, 0.5)
"""The primary rate's window, as fractions of T: the first half of the run."""
RELATIVE_TARGET = 0.5
"""Secondary speed: the first iteration with Φ(t) ≤ RELATIVE_TARGET · Φ(0)."""
STALL_RATIO = 0.99
"""A run with Φ(T)/Φ(0) ≥ STALL_RATIO (less than 1 % fall over T) is ``stalled``."""
SPEARMAN_BOUND = 0.8
"""(b) holds at ρ ≥ 0.8 (five β: at most one adjacent swap), fails at ρ ≤ −0.8."""
SENSITIVITY_FACTORS = (0.25, 1.0)
SENSITIVITY_BETAS = (0.0, 1.0)
FACTORIAL_CELLS = ((0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0))
MIN_COVERAGE = 0.9
"""The interval rule's minimum coverage (as the map's ``MapGrid.min_coverage``): 8 seeds → k = 2, 93.0 %."""
MIN_INTERVAL_SEEDS = 8
"""The interval rule needs at least this many seeds per arm (with fewer, no k reaches a useful level)."""
INTERVAL_ARMS = (("beta", f"theory c={THEORY_PRIMARY:g}"), ("factorial", f"theory c={THEORY_PRIMARY:g}"))
"""(experiment, protocol label) of the arms decided by the interval rule; every other arm: the sign rule."""
RULES = ("sign", "interval")
OUTCOMES = ("learning", "stalled", "diverged")
VERDICTS = ("holds", "fails", "undecided")


@dataclass(frozen=True)
class Arm:
    """One group of runs: the comparison it serves, its protocol (and factor c), its twin init, its
    points (β, β_ffn, L), how many of the settings' seeds it uses (None: all) and its verdict
    rule (:func:`rule`: ``"interval"`` arms train ``Settings.interval_seeds``)."""

    experiment: str
    protocol: str
    c: float | None
    twin_init: str
    points: tuple[tuple[float, float | None, int], ...]
    n_seeds: int | None = None

    @property
    def label(self) -> str:
        return self.protocol if self.c is None else f"{self.protocol} c={self.c:g}"

    @property
    def rule(self) -> str:
        return rule(self.experiment, self.label)

    def seeds(self, s) -> tuple[int, ...]:
        """The seeds this arm trains, from :class:`resgd.experiments.study.Settings` ``s``."""
        if self.rule == "interval":
            return tuple(s.interval_seeds)
        return tuple(s.seeds[: self.n_seeds] if self.n_seeds else s.seeds)


def rule(experiment: str, protocol: str) -> str:
    """The verdict rule of the runs of ``experiment`` under ``protocol`` (a label such as
    ``"theory c=0.5"``): ``"interval"`` for :data:`INTERVAL_ARMS`, ``"sign"`` otherwise."""
    return "interval" if (experiment, protocol) in INTERVAL_ARMS else "sign"


def arms(betas: tuple[float, ...], depths: tuple[int, ...]) -> list[Arm]:
    """Every arm of one data set's pages, in the order they are run."""
    c0 = THEORY_PRIMARY
    beta_points = tuple((float(b), None, 1) for b in betas)
    ends = tuple((b, None, 1) for b in SENSITIVITY_BETAS)
    depth_points = tuple((b, None, int(L)) for L in depths for b in (1.0, 0.0))
    factorial = tuple((b, None if b == f else f, 1) for b, f in FACTORIAL_CELLS)
    out = [
        Arm("beta", "common", None, "living", beta_points),
        Arm("beta", "theory", c0, "living", beta_points),
        *(Arm("beta", "theory", c, "living", ends) for c in SENSITIVITY_FACTORS),
        Arm("factorial", "theory", c0, "living", factorial),
        Arm("depth", "common", None, "living", depth_points),
        Arm("depth", "theory", c0, "living", depth_points),
        Arm("depth", "common", None, "scaled", tuple((0.0, None, int(L)) for L in depths), n_seeds=1),
    ]
    return out


def training_cost(s) -> int:
    """The design's training work in sample·layer·iterations (N·L·T summed over the distinct runs
    of every arm; a run two arms share, such as the factorial's corners, counted once; probes and
    L̂ not included): the budget measure behind the seed counts (``book/choices.md``)."""
    runs = set()
    for arm in arms(s.betas, s.depths):
        depth = arm.experiment == "depth"
        for beta, beta_ffn, L in arm.points:
            ffn = beta if beta_ffn is None else beta_ffn
            for seed in arm.seeds(s):
                runs.add((depth, arm.label, arm.twin_init if beta == 0 else "", beta, ffn, L, seed))
    return sum((s.depth_N * L * s.depth_iterations) if depth else (s.N * L * s.iterations)
               for depth, _, _, _, _, L, _ in runs)
