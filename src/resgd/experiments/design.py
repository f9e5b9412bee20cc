"""The pre-registered design of the experiment pages: which runs, which measures, which verdict
rules. Fixed in code and committed before the first run of this design; the book shows that
commit (``book/choices.md``). Nothing here may be changed to make a claim pass.

Arms (one :class:`Arm` per group of runs that share protocol, step factor and twin init):

* ``beta`` — L = 1, every β of ``Settings.betas``, under ``common`` and ``theory`` c = 0.5; the
  theory factors c = 0.25 and 1 at β ∈ {0, 1} only (a sensitivity check of the step). Every β < 1
  is **matched** to the β = 1 model's signal at t = 0 (:mod:`resgd.experiments.configuration`), so that only
  the skip weight differs; the plain init of 0 < β < 1 (the earlier design's, where ‖Z‖ and so
  L̂ were smaller and μ larger) is a sensitivity row under ``theory`` c = 0.5 with
  :data:`PLAIN_INIT_SEEDS` seeds (``twin_init="living"``), never in a verdict;
* ``factorial`` — L = 1, attention skip × FFN skip, (β, β_ffn) ∈ {0, 1}², under ``theory`` c = 0.5;
* seeds: the three arms that decide at L = 1 (the ``beta`` sweep under ``common`` and under
  ``theory`` c = 0.5, and the ``factorial`` under ``theory`` c = 0.5: :data:`INTERVAL_ARMS`) train
  ``Settings.interval_seeds`` seeds (8 in quick and full mode; the first ones are the other arms'
  seeds); every other arm ``Settings.seeds`` (3 in full mode, 2 in quick mode), the dead-by-init
  twin one. (v5: the ``common`` β sweep joined them; under v4 it had 3 seeds, so claims (a) and
  (b) under ``common`` were descriptive and the book's verdict table held the theory arms only);
* ``depth`` — every L of ``Settings.depths``, the residual model (β = 1) and its matched twin
  (β = 0, ``twin_init="matched"``: every hidden state at the residual model's RMS at t = 0,
  :mod:`resgd.experiments.configuration`) under ``common`` and ``theory`` c = 0.5; the earlier "living" twin
  (fixed He scales) and the dead-by-init twin (``twin_init="scaled"``) under ``common``, first seed
  only, shown and labelled as sensitivity rows, never in a verdict.

Measures (per run; :func:`resgd.experiments.results.per_run_table`), one speed for the pages and the map:

* primary: the **contraction rate** r = −log(Φ(T)/Φ(0)) / T, the mean per-iteration log contraction of
  Φ over the whole run (``rate``; −∞ when diverged). Why this one: Theorem 1 promises
  Φ(t+1) ≤ (1 − μα) Φ(t) at every step, so Φ(T)/Φ(0) ≤ (1 − μα)^T and r ≥ −log(1 − μα) ≥ μα: r is the
  quantity the theorem bounds, at the theorem's step. It does not depend on the starting loss, and
  within a comparison (equal T) it orders runs exactly as the robustness map's Φ(T)/Φ(0) does, so
  the pages and the map decide on the same thing (the map's per-seed log ratio is T times the pages'
  difference in r);
* secondary, shown and never deciding: the earlier primary, minus the least-squares slope of log Φ(t)
  over t ∈ [0, T/2] (``rate_half``, :data:`RATE_WINDOW`); the iterations to Φ(t) ≤
  :data:`RELATIVE_TARGET` · Φ(0) (+∞ if never); the loss at T. Two of them are replayed through
  every verdict rule on the same runs (:data:`MEASURES`): ``rate_half``, and ``first_to_target`` =
  −(iterations to Φ(t) ≤ :data:`RELATIVE_TARGET` · Φ(0)), −∞ if never by T ("who gets there
  first": the reading of the paper's loss curves at one loss level, fitted to nothing, the same
  at any T both runs reach it by, and blind to a loss floor below the target; added after v5's
  first build, as a replay that decides nothing);
* outcome: ``diverged`` (the trainer's rule), ``stalled`` (Φ(T)/Φ(0) ≥ :data:`STALL_RATIO`: it
  did not learn), ``learning`` otherwise. A stalled run is never called diverged nor stable.

Verdict rules (:mod:`resgd.experiments.claims`), per data set and protocol, on the primary rate. Each
decides with a false-decision rate of at most :data:`ALPHA` = 5 % under no effect, in each direction
("holds" and "fails" separately), for the verdict as a whole (``tests/test_claims.py`` simulates
every rule the book uses):

* per-seed statistics, oriented so that > 0 is the paper's direction: (a) d = r(β = 1) − r(β = 0);
  (b) ρ_s = Spearman(β, r of seed s) over the five β (a diverged run ranks last); factorial, per
  skip, the mean of its two differences (at both levels of the other skip); (c) d = r(β = 1) −
  r(twin) for every (L, seed) pair;
* ``interval`` (the :data:`INTERVAL_ARMS`, 8 seeds, whatever the protocol): the exact order-statistic
  interval for the median of the per-seed values (:func:`resgd.core.stats.median_interval` at :data:`MIN_COVERAGE`:
  8 seeds → [x₍₂₎, x₍₇₎], level 93.0 %): **holds** above 0, **fails** below, **undecided** otherwise;
  by chance at most 3.5 % each way (it is the exact sign test: 7 of 8 seeds agree);
* ``sign`` (every other arm): the exact sign test at :data:`ALPHA` per direction: **holds** when at
  least k of n per-seed differences are > 0 with P(Bin(n, ½) ≥ k) ≤ 5 %, **fails** likewise below 0.
  With 3 seeds no k qualifies (3 of 3 happens by chance 12.5 % of the time): such an arm is shown,
  with its seed counts, and is **undecided** by design;
* (b) in a ``sign`` arm: Spearman ρ between β and the median rate over seeds: **holds** when ρ ≥
  :data:`SPEARMAN_BOUND`, **fails** when ρ ≤ −:data:`SPEARMAN_BOUND` (five β: 4.2 % each way); since
  v5 no arm uses it (every five-β sweep has 8 seeds and the interval rule): it is simulated among
  the replayed rules of :mod:`resgd.experiments.claims`;
* (c) one statistic per seed: D_s = the median over L = 2, 6, 10 of d_L = r(β = 1) − r(matched twin)
  of seed s, then the arm's rule on the D_s (the sign rule with its 3 seeds: it cannot decide, by
  design). Why per seed: the runs of one seed share the data and the first layers' initial weights,
  so its three differences are not independent; a test that pooled the 3 × 3 (L, seed) pairs (the
  earlier rule, :func:`resgd.experiments.claims.check_depth_pooled`, replayed) decides "holds" 12.5 %
  of the time under no effect when they are fully dependent. The per-depth counts are shown beside
  it and decide nothing (the 8-seed per-depth verdicts are the robustness map's);
* factorial: each skip's effect by the exact sign test on its per-seed mean differences, with
  **Holm's correction** over the two skips in each direction (a skip **speeds up** when its one-sided
  sign p-value is ≤ 2.5 % for the smaller, then ≤ 5 %), in every arm (in an interval arm each skip's
  interval is shown beside it, deciding nothing); the verdict **holds** when some skip speeds up. Theorem 1's α carries β_ffn² (the FFN
  skip), its σ_min(Z) the attention skip.

Horizons (:data:`HORIZONS`): every check is made at T/4, T/2 and T of the same runs (each run read as
if it had stopped there, :func:`resgd.experiments.results.per_run_table`); a verdict **holds** (or
**fails**) only when it does at all three, is **horizon-dependent** when some horizon decides and
another does not agree, else **undecided**. Requiring agreement can only lower a rule's chance of a
decision under no effect. Why not 2T: training every run twice as long does not fit the book's time
budget; the three horizons span the same factor of 4.

The theorem's regime along the path (:func:`resgd.experiments.results.left_regime_at`): a run whose
GD step raised Φ at some t < horizon had μ ≥ 2/L on that step's segment, so it left the regime of
Theorem 1 (which needs μ < 2/L̂ everywhere on the path); every diverged run is such a run. Under the
``theory`` protocols such a run's rate is set to NaN, so its pair (or its seed's statistic) drops
out of the check instead of counting as a win for the other arm; the pages count these runs. Under
``common`` (one step for all, not the theorem's) a diverged run stays the slower one.

Which arms decide: an arm with fewer than :data:`MIN_INTERVAL_SEEDS` seeds is **descriptive**: its
checks are shown beside the verdicts, in their own table, and enter no count of verdicts.

Which protocol the theorem speaks to: ``theory`` (μ = c / L̂(θ⁰ of each seed), the step of its
guarantee).

Design v6 (pre-registered in this commit, before its first run; :mod:`resgd.experiments.study` runs
and decides it; the v5 verdicts above stay on the pages as replayed rows). Why: under v5 the
theorem's step drifted to the edge of stability (μ·L̂(θ_t) → 2) and the rule that dropped those runs
emptied the theory arms and removed the fast ones; the common step was above 2/L̂ for many runs;
neither data set at its size can be fitted, so the whole-run rate ranked floors; 8 of 18 checks had 3
seeds. v6 asks two questions, kept apart, and drops no run:

* *the paper's experiments*, claims (a), (b), (c) at the pages' sizes: every configuration (β, L) at
  its **own stable step** (:mod:`resgd.experiments.study`: the largest step of :data:`OWN_GRID`
  whose run on :data:`TUNING_SEED` descends at every step to the cap), 12 evaluation seeds in every
  arm (``Settings.v6_seeds``), depth included; every run's rises of Φ (steps above the descent
  threshold somewhere on the path) counted and shown, never a reason to drop it. v5's common step is
  kept as a sensitivity row (its 8 and 3 seeds, cap T), decided by the same rule;
* *Theorem 1 in its regime*, claims (a), (b) at L = 1: a small sample of the real data with far more
  weights than targets (``Settings.regime_N``), at the theorem's step kept along the path
  (:mod:`resgd.experiments.steps`: μ = :data:`PATH_C` / L̂(θ_t) re-set every :data:`PATH_EVERY`
  iterations, a segment on which Φ rose retrained with μ halved), Φ* = 0; decided only where the
  β = 1 run of the tuning seed reaches Φ/Φ₀ ≤ :data:`REALISABLE_RATIO` by its cap, else "could not be
  tested". The measured rate is set beside σ_min²(Z⁰)/σ_max²(Z⁰) per run.

Measure (:mod:`resgd.experiments.decisions`): the iterations each run needs to reach Φ* + q (Φ₀ − Φ*) for
q in :data:`LADDER`; runs train :data:`CAP` · T and a run that never reached a target is censored.
Φ* = 0 for the theorem's question, else the lowest loss any run of the comparison (protocol,
experiment, L) reached. Per seed and rung, who got there first (+1, −1, 0 a tie; a pair in which
neither got there is censored and decides nothing, so no decided pair can flip by training longer).

Rules, per rung: (a) the pair β = 1 vs β = 0; (b) the sign of Spearman(β, −t) over the five β of a
seed (censored runs rank last); (c) per seed the majority sign over L of the pairs residual vs
matched twin (one statistic per seed: its depths share data and first weights); then the exact sign
test over the decided seeds at :data:`ALPHA` per direction (12 decided seeds: 10 must agree). The
claim **holds** (**fails**) when every testable rung (enough decided seeds for the test to be able to
decide) holds (fails), is **target-dependent** when some testable rung decides and not all agree,
**undecided** when none decides, and **could not be tested** when no rung is testable. Claim (b) is
also shown by its shape as the paper states it (the median time to each rung non-increasing in β).
The false-decision rate of every rule is simulated through the pipeline as run (censoring, the
estimated floor, dependence between a seed's runs; :func:`resgd.experiments.decisions.simulate_rule`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .configuration import Settings
from .steps import THEORY_FACTORS, THEORY_PRIMARY

RATE_WINDOW = (0.0, 0.5)
"""The primary rate's window, as fractions of T: the first half of the run."""
RELATIVE_TARGET = 0.5
"""Secondary speed: the first iteration with Φ(t) ≤ RELATIVE_TARGET · Φ(0)."""
STALL_RATIO = 0.99
"""A run with Φ(T)/Φ(0) ≥ STALL_RATIO (less than 1 % fall over T) is ``stalled``."""
SPEARMAN_BOUND = 0.9
"""(b) in a sign arm holds at ρ ≥ 0.9 (five β: at most one adjacent swap; 5 of 120 orders, 4.2 %), fails at ρ ≤ −0.9."""
ALPHA = 0.05
"""Every verdict's false-decision rate under no effect, per direction ("holds", "fails"), at most this."""
MEASURES = ("rate", "rate_half", "first_to_target")
"""The primary speed (``rate``: −log(Φ(T)/Φ(0))/T) and two replayed beside it on the same runs: the
earlier one (``rate_half``) and who reaches Φ ≤ RELATIVE_TARGET · Φ(0) first (``first_to_target``)."""
SENSITIVITY_FACTORS = (0.25, 1.0)
PLAIN_INIT_SEEDS = 3
"""Seeds of the β sweep's plain-init sensitivity row (0 < β < 1 without gains, as before this design)."""
SENSITIVITY_BETAS = (0.0, 1.0)
FACTORIAL_CELLS = ((0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0))
MIN_COVERAGE = 0.9
"""The interval rule's minimum coverage (as the map's ``MapGrid.min_coverage``): 8 seeds → k = 2, 93.0 %."""
MIN_INTERVAL_SEEDS = 8
"""The interval rule needs at least this many seeds per arm (with fewer, no k reaches a useful level)."""
INTERVAL_ARMS = (("beta", "common"), ("beta", f"theory c={THEORY_PRIMARY:g}"), ("factorial", f"theory c={THEORY_PRIMARY:g}"))
"""(experiment, protocol label) of the arms that train 8 seeds and are decided by the interval rule
(v5 added the ``common`` β sweep); every other arm: the sign rule."""
RULES = ("sign", "interval")
OUTCOMES = ("learning", "stalled", "diverged")
VERDICTS = ("holds", "fails", "horizon-dependent", "undecided")
HORIZONS = (0.25, 0.5, 1.0)
"""The fractions of T at which every check is made; a verdict holds or fails only when all agree."""

# ------------------------------------------------------------------------------------ design v6
# Pre-registered before its first run (the module docstring's "Design v6" states why each choice).
TUNING_SEED = 100
"""The seed whose runs choose each configuration's own step (never an evaluation seed)."""
LADDER = (0.5, 0.25, 0.1, 0.01)
"""The rungs q of the time-to-target measure: the target Φ* + q (Φ₀ − Φ*)."""
CAP = 2
"""v6 runs train CAP · T iterations (T: the data set's ``iterations``, ``depth_iterations``): the cap at
which a run that has not reached a target is censored."""
OWN_GRID = tuple(10.0 ** (-k / 4) for k in range(25))
"""The grid of each configuration's own step: quarter decades from 1 down to 1e-6."""
PATH_C = 0.5
"""The theorem's step kept along the path: μ_t ≤ PATH_C / L̂(θ_t) at every checkpoint."""
REALISABLE_RATIO = 1e-3
"""The data are realisable in the theorem's sense when the β = 1 run of the tuning seed reaches
Φ/Φ₀ ≤ REALISABLE_RATIO by its cap; where not, the theorem's question "could not be tested"."""
OWN, PATH, COMMON = "own step", f"theorem path c={PATH_C:g}", "common step"
"""The v6 protocols' labels: each configuration's own stable step; the theorem's step kept along the
path; v5's one common step (a sensitivity row)."""


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
        """The seeds this arm trains, from :class:`resgd.experiments.configuration.Settings` ``s``."""
        if self.n_seeds:
            return tuple(s.seeds[: self.n_seeds])
        return tuple(s.interval_seeds) if self.rule == "interval" else tuple(s.seeds)


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
        Arm("beta", "common", None, "matched", beta_points),
        Arm("beta", "theory", c0, "matched", beta_points),
        *(Arm("beta", "theory", c, "matched", ends) for c in SENSITIVITY_FACTORS),
        Arm("beta", "theory", c0, "living", tuple(p for p in beta_points if 0 < p[0] < 1), n_seeds=PLAIN_INIT_SEEDS),
        Arm("factorial", "theory", c0, "matched", factorial),
        Arm("depth", "common", None, "matched", depth_points),
        Arm("depth", "theory", c0, "matched", depth_points),
        Arm("depth", "common", None, "living", tuple((0.0, None, int(L)) for L in depths), n_seeds=1),
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



# -------------------------------------------------------------------------- the companion's choices
# The companion's choices behind the experiments of pages 4 and 5, as the table the pages show.

def choices_table(s: Settings) -> pd.DataFrame:
    """The companion's choices behind these experiments, one row each, with the parameter that holds it."""
    rows = [
        ("loss normalisation", f"reduction={s.reduction!r}: Φ = ½ Σ‖Ŷ−Y‖² / N (mean over samples); GD with step μ on it is GD on the paper's sum with step μ/N", "Settings.reduction"),
        ("widths", f"d_qk = {s.d_qk}, FFN width m = {s.m}", "preset()['widths']"),
        ("initialisation", f"every weight N(0, scale²/fan_in); qk_scale = {s.qk_scale}", "Settings.qk_scale"),
        ("start", f"read-out scale {s.equal_out_scale}: Ŷ⁰ ≈ 0, every model starts near Φ(Ŷ = 0)" if s.start == "equal" else f"read-out scale {s.out_scale}", "Settings.start, equal_out_scale, out_scale"),
        ("depth scaling of the init", "W_V, W_1, W_2 scaled by 1/√L in every sublayer with its skip" if s.branch_scale == "1/sqrt(L)" else "no depth scaling", "Settings.branch_scale"),
        ("twin without residual", f"'{s.twin_init}': " + {"matched": "a sublayer without skip gets a gain on W_V / W_2 so that every hidden state has the residual model's RMS at t = 0 (same seed, same data; experiments.configuration)", "living": "a sublayer without skip gets W_V scale 1 and W_1, W_2 scale √2", "scaled": "the same depth scaling as the residual model (dead at L = 6, 10)"}[s.twin_init] + "; the depth figure also shows the He-scaled ('living') and the 1/√L-init twins, labelled, one seed, never in a verdict", "Settings.twin_init"),
        ("residual placement", "β multiplies the skip path of both sublayers (β_ffn = β) except in the factorial, which sets β_ffn apart", "ModelConfig.beta, beta_ffn"),
        ("activation, logit scale", f"{s.activation}, logits / √d_qk" if s.logit_scale == "sqrt" else f"{s.activation}, logits / d_qk", "Settings.activation, Settings.logit_scale"),
        ("step size: common", f"largest μ on the grid {list(s.lr_grid)} for which every β = 1 model of the comparison has a finite loss, lower after {s.probe_iterations} GD steps than at the start (seed {s.seeds[0]}), times safety {s.safety}; one μ per comparison", "Settings.lr_grid, probe_iterations, safety"),
        ("step size: theory", f"μ = c / L̂(β, L, θ⁰), L̂ = max(‖∇²Φ‖, λ_max(JJᵀ)/N) at each seed's own θ⁰, so each run its own μ (power iteration, 20 steps); c ∈ {list(THEORY_FACTORS)}, c = {THEORY_PRIMARY} primary", "step_size.THEORY_FACTORS"),
        ("sizes", f"β sweep and factorial: N = {s.N}, T = {s.iterations}; depth sweep: N = {s.depth_N}, T = {s.depth_iterations}", "Settings.N, iterations, depth_N, depth_iterations"),
        ("seeds", f"{len(s.interval_seeds)} initialisation seeds {list(s.interval_seeds)} in the L = 1 arms that decide (β sweep under common and theory c = {THEORY_PRIMARY:g}, factorial under theory c = {THEORY_PRIMARY:g}), {len(s.seeds)} seeds {list(s.seeds)} in every other arm; the data sample is fixed (data seed {s.data_seed}); curves: mean, band = min–max over seeds", "Settings.interval_seeds, seeds, data_seed; design.INTERVAL_ARMS"),
        ("divergence", "a run stops when Φ exceeds 10⁶ Φ(θ⁽⁰⁾) or is not finite; it is kept (partial history, outcome 'diverged', rate −∞)", "GDConfig.divergence_factor"),
        ("stalled", f"Φ(T)/Φ(0) ≥ {STALL_RATIO}: outcome 'stalled' (never 'diverged', never 'stable')", "design.STALL_RATIO"),
        ("primary speed", "rate = −log(Φ(T)/Φ(0)) / T, the mean per-iteration log contraction (what Theorem 1 bounds by μα); the robustness map decides on the same Φ(T)/Φ(0)", "design (Measures)"),
        ("secondary speeds", f"rate_half = minus the least-squares slope of log Φ(t) over t ∈ [{RATE_WINDOW[0]:g}·T, {RATE_WINDOW[1]:g}·T] (replayed beside the verdicts); iterations to Φ(t) ≤ {RELATIVE_TARGET} Φ(0) (its negative, first_to_target, replayed through the rules: who gets there first); loss at T; shown, never deciding", "design.RATE_WINDOW, RELATIVE_TARGET"),
        ("verdict rules: 8-seed arms", f"L = 1, the β sweep under both protocols and the factorial: the exact interval for the median of a per-seed statistic ((a) rate difference, (b) Spearman(β, rate), factorial: a skip's mean difference), level ≥ {MIN_COVERAGE:g} (93.0 % at 8 seeds); holds above 0, fails below, else undecided", "design.INTERVAL_ARMS, MIN_COVERAGE; rules.interval_rule"),
        ("verdict rules: other arms", f"(a) at c ≠ {THEORY_PRIMARY:g}: the exact sign test at {ALPHA:.0%} per direction; (c): the same test over seeds of each seed's median over L of the rate difference; with {len(s.seeds)} seeds neither can decide (descriptive); (b) in a sign arm (none since design v5): Spearman(β, median rate) ≥ {SPEARMAN_BOUND} holds, ≤ −{SPEARMAN_BOUND} fails (4.2 % each way)", "design, claims"),
        ("factorial", f"each skip: the sign test of its per-seed mean difference, Holm-corrected over the two skips per direction (family-wise ≤ {ALPHA:.0%})", "claims.check_factorial, rules.holm"),
        ("precision", f"{s.dtype} throughout", "Settings.dtype"),
    ]
    return pd.DataFrame(rows, columns=["choice", "value", "parameter"])
