"""Design v6's two step rules on the toy data: the theorem's step kept along the path
(resgd.experiments.steps) and each configuration's own stable step (resgd.experiments.study)."""

from __future__ import annotations

import numpy as np

from resgd.data.spec import load_dataset
from resgd.experiments.configuration import settings
from resgd.experiments.design import OWN_GRID
from resgd.experiments.decisions import rises
from resgd.experiments.study import own_steps
from resgd.experiments.steps import PATH_EVERY, _compute_path, path_table, train_path


def test_the_path_step_keeps_mu_times_lhat_at_c_at_every_checkpoint_and_never_raises_the_loss():
    s = settings("toy", True)
    T = 2 * PATH_EVERY + 50
    config = s.config(1.0, 1, 0, 0.5, iterations=T)
    history, _ = train_path(config, load_dataset(config.dataset, config.dtype))
    assert history["iteration"].tolist() == list(range(T + 1))
    at = np.flatnonzero(np.isfinite(history["L_hat"].to_numpy()))
    assert at.tolist() == [0, PATH_EVERY, 2 * PATH_EVERY, T]
    mu_l = history["step"].to_numpy()[at[:-1]] * history["L_hat"].to_numpy()[at[:-1]]
    assert np.all(mu_l <= 0.5 * (1 + 1e-12)) and np.all(mu_l > 0)
    assert rises(history["loss"].to_numpy()) == 0


def test_the_path_table_reads_the_checks_and_the_rates():
    s = settings("toy", True)
    frame = _compute_path(s.config(1.0, 1, 0, 0.5, iterations=PATH_EVERY + 20)).assign(
        experiment="beta", protocol="p", twin_init="matched")
    table = path_table(frame, ["experiment", "protocol", "twin_init", "beta", "beta_ffn", "n_layers", "seed"])
    row = table.iloc[0]
    assert row["max_muL_checkpoint"] <= 0.5 * (1 + 1e-12)
    assert row["max_muL_segment_end"] > 0 and row["rate"] > 0 and row["predicted"] > 0
    assert row["step_sum"] > 0


def test_the_own_step_is_the_largest_grid_step_that_descends_along_the_whole_path(tmp_path):
    s = settings("toy", True)
    points = {"beta": [(1.0, None, 1), (0.0, None, 1)]}
    table = own_steps(s, points, n_jobs=1, cache_dir=tmp_path)
    for beta, g in table.groupby("beta"):
        path = g[g["stage"] == "path"].reset_index(drop=True)
        chosen = path[path["chosen"]]
        assert len(chosen) == 1 and int(chosen["rises"].iloc[0]) == 0
        assert (~path["stable"].iloc[:-1]).all()  # every larger step tried before it rose somewhere
        lrs = path["lr"].tolist()
        assert lrs == sorted(lrs, reverse=True)
        assert [OWN_GRID.index(x) for x in lrs] == list(range(OWN_GRID.index(lrs[0]), OWN_GRID.index(lrs[0]) + len(lrs)))
        probe = g[(g["stage"] == "probe") & g["stable"]]
        assert lrs[0] == probe["lr"].max()


def test_a_path_run_cut_after_its_first_segment_repeats_the_full_runs_first_segment_bit_for_bit():
    """What ``make verify`` relies on: the step rule decides over whole segments, so the first segment
    re-executed alone is the stored run's first segment."""
    from resgd.core.trainer import ROW_FIELDS

    s = settings("toy", True)
    full = _compute_path(s.config(0.0, 1, 1, 0.5, iterations=PATH_EVERY + 30))
    first = _compute_path(s.config(0.0, 1, 1, 0.5, iterations=PATH_EVERY))
    for column in ROW_FIELDS:
        a, b = full[column].to_numpy()[: PATH_EVERY + 1], first[column].to_numpy()
        assert np.array_equal(a, b, equal_nan=True), column
