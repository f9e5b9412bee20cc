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

GRID = rb.map_grid(True, datasets=("toy",), iterations=50, horizons=(25, 50))


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
        if cell["claim"] in ("residual_helps", "beta_monotone"):
            effects = [s["effect"] for s in cell["seeds"]]
            assert math.isclose(np.median(effects), cell["effect"], rel_tol=1e-4, abs_tol=1e-6), cell["claim"]
            assert cell["parts"][0]["above"] == sum(e > 0 for e in effects)
        else:  # (c): the verdict's own per-depth summaries; the cell's median is the median of theirs
            assert cell["columns"] == [f"log ratio L={L}" for L in GRID.depths]
            assert [p["label"] for p in cell["parts"]] == [f"L = {L}" for L in GRID.depths]
            assert math.isclose(np.median([p["effect"] for p in cell["parts"]]), cell["effect"], rel_tol=1e-4, abs_tol=1e-6)
            assert cell["lo"] == min(p["lo"] for p in cell["parts"]) and cell["hi"] == max(p["hi"] for p in cell["parts"])
            for p, L in zip(cell["parts"], GRID.depths):
                per_seed = [s[f"log ratio L={L}"] for s in cell["seeds"]]
                assert math.isclose(np.median(per_seed), p["effect"], rel_tol=1e-4, abs_tol=1e-6)
                assert p["above"] == sum(v > 0 for v in per_seed)
        assert cell["lo"] <= cell["effect"] <= cell["hi"]
        assert cell["verdict"] == ("holds" if cell["qk"] == 1.0 else "fails")
        labels = [line["label"] for line in cell["curves"]]
        expected = {"residual_helps": ["L = 1 with residual", "L = 1 without"],
                    "beta_monotone": [f"β = {b:g}" for b in GRID.betas]}.get(
            cell["claim"], [f"L = {L} {arm}" for L in GRID.depths for arm in ("with residual", "without")])
        assert labels == expected, cell["claim"]
        line = cell["curves"][0]
        assert set(line["points"]) == {str(s) for s in GRID.seeds}
        assert line["points"]["0"][0] == [0, 1.0] and len(line["points"]["0"]) == 3


def test_a_capped_log_ratio_is_labelled_as_the_cap_of_a_diverged_run():
    from resgd.robustness.explorer import _capped

    assert _capped(stats.LOG_CAP).startswith("≥20 (cap: a run diverged)")
    assert _capped(-stats.LOG_CAP).startswith("≤ −20 (cap")
    assert _capped(0.5) == 0.5 and _capped(float("nan")) is None


def test_a_cell_whose_median_is_the_cap_says_so(data):
    """A cell whose median sits at the log ratio's cap shows the cap as such (8 of the book's 72 cells
    showed ±20 as if it were a measured median)."""
    import copy

    from bs4 import BeautifulSoup

    data = copy.deepcopy(data)
    assert data["cap"] == stats.LOG_CAP and not any(c["capped"] for c in data["cells"])
    runs = toy_runs()
    cells = stats.cell_table(runs, GRID)
    first = cells.index[(cells["claim"] == "residual_helps") & (cells["horizon"] == GRID.iterations)
                        & (cells["measure"] == GRID.primary) & cells["protocol"].isin(GRID.protocols)][0]
    cells.loc[first, "effect"] = -stats.LOG_CAP
    capped = [c for c in explorer_data(cells=cells, per_run=runs, grid=GRID)["cells"] if c["capped"]]
    assert len(capped) == 1 and capped[0]["effect"] == -stats.LOG_CAP
    data["cells"] = capped
    page = explorer_html(data)
    static = BeautifulSoup(re.search(r"<noscript>(.*?)</noscript>", page, re.S).group(1), "html.parser")
    assert "−20 (cap: a run diverged)" in static.text.replace("-20", "−20")
    assert "c.capped ? ' (cap)'" in page  # the widget's cells and summary say it too


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
    from bs4 import BeautifulSoup

    fallback = BeautifulSoup(re.search(r"<noscript>(.*?)</noscript>", page, re.S).group(1), "html.parser")
    assert len(fallback.select("table.rx-static tr")) == len(data["cells"]) + 1  # every cell, without JavaScript
    assert "best: " in fallback.text or "best" not in data["protocols"]  # each protocol defined


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
        assert "with residual" in driver.find_element(By.CSS_SELECTOR, ".rx-legend").text
        assert driver.find_element(By.CSS_SELECTOR, ".rx-protocol-text").text.startswith(GRID.protocols[0])
        assert not driver.find_elements(By.CSS_SELECTOR, "table.rx-static")  # the fallback stays hidden
        driver.save_screenshot(str(tmp_path / "explorer-js-on.png"))
    with browser.serve(tmp_path) as url, browser.chromium(javascript=False) as driver:
        driver.get(f"{url}/map.html")
        assert not driver.find_elements(By.CSS_SELECTOR, ".rx-cell")
        assert not driver.find_element(By.CSS_SELECTOR, ".rx-controls").is_displayed()  # no empty drop-downs
        static = driver.find_elements(By.CSS_SELECTOR, "table.rx-static tr")
        assert len(static) == len(data["cells"]) + 1
        assert driver.save_screenshot(str(tmp_path / "explorer-js-off.png"))
