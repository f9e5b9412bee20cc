"""The companion's choices behind the experiments of pages 4 and 5, as the table the pages show.

Why a module of its own: the paper's text was not available to us, so every setting it leaves open
is a choice of ours; this table lists each one with the parameter that holds it, in one place the
pages (and ``book/choices.md``) can point to, apart from the code that runs the study.
"""

from __future__ import annotations

import pandas as pd

from .design import ALPHA, MIN_COVERAGE, RATE_WINDOW, RELATIVE_TARGET, SPEARMAN_BOUND, STALL_RATIO
from .experiment_settings import Settings
from .step_size import THEORY_FACTORS, THEORY_PRIMARY


def choices_table(s: Settings) -> pd.DataFrame:
    """The companion's choices behind these experiments, one row each, with the parameter that holds it."""
    rows = [
        ("loss normalisation", f"reduction={s.reduction!r}: Φ = ½ Σ‖Ŷ−Y‖² / N (mean over samples); GD with step μ on it is GD on the paper's sum with step μ/N", "Settings.reduction"),
        ("widths", f"d_qk = {s.d_qk}, FFN width m = {s.m}", "preset()['widths']"),
        ("initialisation", f"every weight N(0, scale²/fan_in); qk_scale = {s.qk_scale}", "Settings.qk_scale"),
        ("start", f"read-out scale {s.equal_out_scale}: Ŷ⁰ ≈ 0, every model starts near Φ(Ŷ = 0)" if s.start == "equal" else f"read-out scale {s.out_scale}", "Settings.start, equal_out_scale, out_scale"),
        ("depth scaling of the init", "W_V, W_1, W_2 scaled by 1/√L in every sublayer with its skip" if s.branch_scale == "1/sqrt(L)" else "no depth scaling", "Settings.branch_scale"),
        ("twin without residual", f"'{s.twin_init}': " + {"matched": "a sublayer without skip gets a gain on W_V / W_2 so that every hidden state has the residual model's RMS at t = 0 (same seed, same data; experiments.twin)", "living": "a sublayer without skip gets W_V scale 1 and W_1, W_2 scale √2", "scaled": "the same depth scaling as the residual model (dead at L = 6, 10)"}[s.twin_init] + "; the depth figure also shows the He-scaled ('living') and the 1/√L-init twins, labelled, one seed, never in a verdict", "Settings.twin_init"),
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
