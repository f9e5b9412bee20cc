"""The explorable robustness map (:mod:`resgd.robustness.explorer`, :mod:`resgd.plots.robustness_explorer`): its data agree with the
verdicts' medians, its HTML is self-contained, and in Chromium a click on a cell lists its seeds."""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pandas as pd
import pytest

from resgd.plots.robustness_explorer import explorer_html
from resgd.publish import browser
from resgd.robustness import study as rb
from resgd.robustness import verdicts as stats
from resgd.robustness.explorer import explorer_data

GRID = rb.map_grid(True, datasets=("toy",), horizons=(25, 50))


def toy_runs() -> pd.DataFrame:
    """Every cell of GRID: with residual faster than without at Q/K scale 1, slower at 4."""
    rows = []
    points = [(b, 1, "matched") for b in GRID.betas] + [p for L in GRID.depths for p in ((1.0, L, "matched"), (0.0, L, "matched"))]
    for cell in GRID.cells():
        for beta, L, init in points:
            for s in GRID.seeds:
                sign = 1 if cell["qk_scale"] == 1.0 else -1
                value = float(np.exp(-sign * (1 + beta) * (1 + 0.05 * s)))
                rows.append({**cell, "beta": beta, "n_layers": L, "init": init, "seed": s, "lr": 0.1, "diverged": False,
                             "outcome": "learns", "loss_start": 1.0, "loss_25": value ** 0.5, "loss_50": value,
                             "relative_25": value ** 0.5, "relative_50": value, "iterations_to_target": 10.0,
                             "rate_ratio_Z0": 0.1})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def data():
    runs = toy_runs()
    return explorer_data(cells=stats.cell_table(runs, GRID), per_run=runs, grid=GRID)


def test_each_cell_carries_the_seeds_its_verdict_was_computed_from(data):
    assert data["horizon"] == 50 and data["threshold"] == 0.0
    assert {c["protocol"] for c in data["cells"]} == set(GRID.protocols)  # no derived `best`
    assert len(data["cells"]) == len(GRID.cells()) * len(data["claims"])
    for cell in data["cells"]:
        assert [s["seed"] for s in cell["seeds"]] == list(GRID.seeds)
        if cell["claim"] in ("residual_helps", "beta_monotone"):  # (c): each depth's interval, then the worst
            effects = [s["effect"] for s in cell["seeds"]]
            assert math.isclose(np.median(effects), cell["effect"], rel_tol=1e-4, abs_tol=1e-6), cell["claim"]
        else:
            assert cell["columns"] == [f"log ratio L={L}" for L in GRID.depths] + ["min over L"]
        assert cell["lo"] <= cell["effect"] <= cell["hi"]
        assert cell["verdict"] == ("holds" if cell["qk"] == 1.0 else "fails")
        assert set(cell["curves"]) == {str(s) for s in GRID.seeds}
        assert cell["curves"]["0"]["with"][0] == [0, 1.0] and len(cell["curves"]["0"]["with"]) == 3


def test_json_has_no_nan_and_the_html_is_self_contained(data):
    cell = data["cells"][0]
    cell["seeds"][0]["effect"] = None  # a seed left out (both arms diverged)
    page = explorer_html(data)
    payload = re.search(r'<script type="application/json" id="([^"]+)-data">(.*?)</script>', page, re.S)
    assert json.loads(payload.group(2))["horizon"] == 50
    assert "NaN" not in payload.group(2) and "Infinity" not in payload.group(2)
    assert not re.search(r"(src|href)=\"?https?:", page)  # nothing from a CDN
    assert "@media print" in page and "display: none" in page
    assert explorer_html(data) != page  # ids are unique per widget


@pytest.mark.browser
def test_clicking_a_cell_lists_its_seeds(data, tmp_path):
    if not browser.have_chromium():
        if os.environ.get("RESGD_REQUIRE_SITE") == "1":
            pytest.fail("no Chromium and RESGD_REQUIRE_SITE=1")
        pytest.skip(f"{browser.CHROMIUM} or {browser.CHROMEDRIVER} missing (apt-get install chromium chromium-driver)")
    from selenium.webdriver.common.by import By

    (tmp_path / "map.html").write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
                                       + explorer_html(data) + "</body></html>", encoding="utf8")
    with browser.serve(tmp_path) as url, browser.chromium() as driver:
        driver.get(f"{url}/map.html")
        cells = driver.find_elements(By.CSS_SELECTOR, ".rx-cell")
        assert len(cells) == len(GRID.qk_scales) * len(GRID.fractions)  # first protocol, first claim
        cells[0].click()
        rows = driver.find_elements(By.CSS_SELECTOR, ".rx-detail tr.rx-seed")
        assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == [str(s) for s in GRID.seeds]
        summary = driver.find_element(By.CSS_SELECTOR, ".rx-summary").text
        assert "interval [" in summary and "above 0" in summary
        assert driver.find_elements(By.CSS_SELECTOR, ".rx-detail svg.rx-curves polyline")
