"""The robustness map as an explorable page widget: click a cell, see the seeds behind its verdict.

The phase diagrams (:mod:`.robustness`) show each cell's median and ✓/✗/?; a reader cannot see the
seeds that decided it. :func:`explorer_data` collects, per cell, the per-seed values the verdict
was computed from (:mod:`resgd.robustness.verdicts`), the interval and the threshold, and each
seed's Φ(t)/Φ(0) at the map's horizons; :func:`explorer_html` turns them into one self-contained
HTML fragment (inline SVG and vanilla JavaScript: no CDN, works offline, hidden in print, where the
static figure stands in). In a notebook::

    from IPython.display import HTML
    from resgd.plots.robustness_explorer import explorer_html
    HTML(explorer_html(results))
"""

from __future__ import annotations

import html
import json
import math
import uuid
from typing import Any

import numpy as np
import pandas as pd

from .robustness import CLAIM_ROWS, LETTER, XLABEL

CLAIM_TEXT = {
    "residual_helps": "(a) residual vs none, L = 1: per seed log(Φ(T)/Φ(0) without / with)",
    "beta_monotone": "(b) β ordering, L = 1: per seed −Spearman(β, Φ(T)/Φ(0))",
    "depth_residual_helps": "(c) residual vs none at every depth: per seed log ratio at each L (verdict: worst depth)",
    "depth_residual_helps_second": "(c) against the second twin: per seed log ratio at each L",
}
MIN_OVER_L = "min over L"
THRESHOLD = 0.0
"""A claim holds when its interval lies above this, fails when below (:func:`resgd.robustness.verdicts.verdict`)."""


def _num(x: Any) -> Any:
    """JSON has no NaN or ∞: NaN → None, ±∞ → "inf"/"-inf" (the widget prints them)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return round(x, 6)


def _arm(rows: pd.DataFrame, beta: float, L: int, init: str | None, column: str) -> pd.Series:
    at = rows[(rows["n_layers"] == L) & (rows["beta"] == beta)]
    if init is not None:
        at = at[at["init"] == init]
    return at.drop_duplicates("seed").set_index("seed")[column]


def seed_table(rows: pd.DataFrame, grid, claim: str, horizon: int, measure: str) -> tuple[list[str], list[dict]]:
    """One cell × protocol's per-seed values for ``claim``: (column names, one dict per seed), the
    same numbers :func:`resgd.robustness.verdicts.cell_effects` takes the median and interval of."""
    from ..robustness.verdicts import DEPTH_CLAIMS, log_ratio, spearman_rows

    column = f"{measure}_{horizon}"
    phi = "Φ(T)/Φ(0)" if measure == "relative" else "Φ(T)"
    seeds = sorted(int(s) for s in rows["seed"].unique())
    if claim == "residual_helps":
        w, wo = _arm(rows, 1.0, 1, None, column), _arm(rows, 0.0, 1, grid.twins[0], column)
        names = [f"{phi} with residual", f"{phi} without", "effect"]
        out = [{"seed": s, names[0]: w.get(s), names[1]: wo.get(s),
                "effect": float(log_ratio(wo.get(s, np.nan), w.get(s, np.nan))) if s in w and s in wo else None}
               for s in seeds]
    elif claim == "beta_monotone":
        single = rows[rows["n_layers"] == 1]
        table = single.pivot_table(index="beta", columns="seed", values=column, aggfunc="first", dropna=False).sort_index()
        effects = dict(zip(table.columns, -spearman_rows(table.index.to_numpy(dtype=float), table.to_numpy(dtype=float).T)))
        names = [f"{phi} β={b:g}" for b in table.index] + ["effect"]
        out = [{"seed": s, **{f"{phi} β={b:g}": table.loc[b, s] if s in table.columns else None for b in table.index},
                "effect": effects.get(s)} for s in seeds]
    else:
        init = grid.twins[DEPTH_CLAIMS.index(claim)] if claim in DEPTH_CLAIMS else grid.twins[0]
        names, per = [], {}
        for L in grid.depths:
            w, wo = _arm(rows, 1.0, L, None, column), _arm(rows, 0.0, L, init, column)
            names.append(f"log ratio L={L}")
            per[L] = {s: float(log_ratio(wo[s], w[s])) for s in seeds if s in w and s in wo}
        names.append(MIN_OVER_L)  # the verdict itself takes each depth's interval, then the worst (verdicts.py)
        out = []
        for s in seeds:
            values = [per[L].get(s) for L in grid.depths]
            row = {"seed": s, **dict(zip(names, values))}
            row[MIN_OVER_L] = min(values) if all(v is not None and not math.isnan(v) for v in values) else None
            out.append(row)
    return names, [{k: (v if k == "seed" else _num(v)) for k, v in row.items()} for row in out]


def seed_curves(rows: pd.DataFrame, grid, measure: str) -> dict[str, list]:
    """Per seed, Φ(t)/Φ(0) of the L = 1 pair (with residual, without) at t = 0 and every horizon."""
    out = {}
    for label, beta, init in (("with", 1.0, None), ("without", 0.0, grid.twins[0])):
        arms = {T: _arm(rows, beta, 1, init, f"{measure}_{T}") for T in grid.horizons}
        start = 1.0 if measure == "relative" else None
        for s in sorted(int(s) for s in rows["seed"].unique()):
            points = [[0, start]] if start is not None else []
            points += [[int(T), _num(arms[T].get(s))] for T in grid.horizons if s in arms[T]]
            out.setdefault(str(s), {})[label] = points
    return out


def explorer_data(results=None, *, cells: pd.DataFrame | None = None, per_run: pd.DataFrame | None = None,
                  grid=None, horizon: int | None = None, measure: str | None = None) -> dict:
    """The widget's JSON-ready data: every cell × protocol × claim of the map at ``horizon``
    (default: the last) on ``measure`` (default: the primary), with its seeds. Pass a
    :class:`resgd.robustness.study.MapResults`, or its ``cells``, ``per_run`` and ``grid``."""
    from ..robustness.map_runs import TAGS

    if results is not None:
        cells, per_run, grid = results.cells, results.per_run, results.grid
    horizon = grid.iterations if horizon is None else horizon
    measure = grid.primary if measure is None else measure
    at = cells[(cells["horizon"] == horizon) & (cells["measure"] == measure) & cells["protocol"].isin(grid.protocols)]
    runs = {keys: g for keys, g in per_run.groupby(TAGS, sort=False)}
    items = []
    for _, c in at.iterrows():
        key = tuple(c[t] for t in TAGS)
        rows = runs.get(key)
        names, seeds = seed_table(rows, grid, c["claim"], horizon, measure) if rows is not None else ([], [])
        items.append(dict(
            dataset=str(c["dataset"]), N=int(c["N"]), qk=_num(c["qk_scale"]), step=_num(c["fraction"]),
            protocol=str(c["protocol"]), claim=str(c["claim"]), verdict=str(c["verdict"]),
            effect=_num(c["effect"]), lo=_num(c["lo"]), hi=_num(c["hi"]), level=_num(c["level"]),
            n_seeds=int(c["seeds"]) if pd.notna(c["seeds"]) else 0, columns=names, seeds=seeds,
            curves=seed_curves(rows, grid, measure) if rows is not None else {},
        ))
    claims = [k for k in CLAIM_ROWS if k in set(at["claim"])]
    return dict(
        horizon=int(horizon), measure=measure, threshold=THRESHOLD,
        protocols=[p for p in grid.protocols if p in set(at["protocol"])],
        claims=claims, claim_text={k: CLAIM_TEXT.get(k, k) for k in claims},
        panels=[[d, int(n)] for d in grid.datasets for n in grid.sizes],
        qk=[_num(q) for q in grid.qk_scales],
        steps={p: [_num(f) for f in grid.steps(p)] for p in grid.protocols},
        xlabel={p: XLABEL.get(p, "step / own stability limit") for p in grid.protocols},
        letter=LETTER, cells=items,
    )


STYLE = """
.resgd-explorer { font-size: 0.9em; margin: 1em 0; }
.resgd-explorer .rx-controls label { margin-right: 1em; }
.resgd-explorer .rx-panels { display: flex; flex-wrap: wrap; gap: 1em; }
.resgd-explorer .rx-cell { cursor: pointer; }
.resgd-explorer .rx-cell:focus rect, .resgd-explorer .rx-cell.rx-chosen rect { stroke: #000; stroke-width: 3; }
.resgd-explorer table { border-collapse: collapse; margin: 0.5em 0; }
.resgd-explorer td, .resgd-explorer th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
@media print { .resgd-explorer { display: none !important; } }
"""

SCRIPT = r"""
(function () {
  const root = document.getElementById(ROOT_ID);
  const data = JSON.parse(document.getElementById(ROOT_ID + '-data').textContent);
  const NS = 'http://www.w3.org/2000/svg';
  const colour = {holds: '#2a9d8f', fails: '#e76f51', undecided: '#cccccc'};
  const fmt = v => v === null || v === undefined ? '–' : v === 'inf' ? '∞' : v === '-inf' ? '−∞'
      : (typeof v === 'number' ? Number(v.toPrecision(3)).toString() : String(v));
  const el = (tag, attrs, text) => { const n = document.createElementNS(NS, tag);
      for (const k in attrs) n.setAttribute(k, attrs[k]); if (text !== undefined) n.textContent = text; return n; };
  const pick = root.querySelector('.rx-protocol'), claim = root.querySelector('.rx-claim');
  data.protocols.forEach(p => pick.add(new Option(p, p)));
  data.claims.forEach(c => claim.add(new Option(data.claim_text[c], c)));
  const panels = root.querySelector('.rx-panels'), detail = root.querySelector('.rx-detail');
  function curves(cell) {
    const size = [380, 150], pad = 30, all = [];
    for (const s in cell.curves) for (const arm in cell.curves[s])
      cell.curves[s][arm].forEach(p => { if (typeof p[1] === 'number' && p[1] > 0) all.push(p); });
    if (!all.length) return null;
    const tmax = Math.max(...all.map(p => p[0])), ys = all.map(p => Math.log10(p[1]));
    const ylo = Math.min(...ys), yhi = Math.max(...ys, ylo + 1e-3);
    const X = t => pad + (size[0] - pad - 5) * t / tmax, Y = y => 5 + (size[1] - pad) * (yhi - Math.log10(y)) / (yhi - ylo);
    const svg = el('svg', {width: size[0], height: size[1], class: 'rx-curves', role: 'img',
        'aria-label': 'Φ(t)/Φ(0) of each seed, with residual (solid) and without (dashed), log scale'});
    svg.appendChild(el('line', {x1: pad, y1: size[1] - pad + 5, x2: size[0] - 5, y2: size[1] - pad + 5, stroke: '#555'}));
    svg.appendChild(el('text', {x: pad, y: size[1] - 8, 'font-size': 10},
        `t = 0 … ${tmax}; log Φ(t)/Φ(0), L = 1: with residual solid, without dashed`));
    for (const s in cell.curves) for (const arm in cell.curves[s]) {
      const pts = cell.curves[s][arm].filter(p => typeof p[1] === 'number' && p[1] > 0);
      if (pts.length < 2) continue;
      svg.appendChild(el('polyline', {points: pts.map(p => X(p[0]) + ',' + Y(p[1])).join(' '), fill: 'none',
          stroke: arm === 'with' ? '#1d5fa8' : '#c0392b', 'stroke-width': 1, 'stroke-dasharray': arm === 'with' ? '' : '3,2'}));
    }
    return svg;
  }
  function show(cell, g) {
    root.querySelectorAll('.rx-chosen').forEach(n => n.classList.remove('rx-chosen'));
    if (g) g.classList.add('rx-chosen');
    detail.innerHTML = '';
    const h = document.createElement('p');
    const value = s => 'effect' in s ? s.effect : s['min over L'];
    const agree = cell.seeds.filter(s => typeof value(s) === 'number' ? value(s) > data.threshold : value(s) === 'inf').length;
    h.textContent = `${cell.dataset}, N = ${cell.N}, Q/K scale ${fmt(cell.qk)}, step ${fmt(cell.step)}, protocol '${cell.protocol}', T = ${data.horizon}: `
      + `${cell.verdict} ${data.letter[cell.verdict]} — median ${fmt(cell.effect)}, interval [${fmt(cell.lo)}, ${fmt(cell.hi)}] `
      + `(exact level ${cell.level === null ? '–' : (100 * cell.level).toFixed(1) + ' %'}; holds when the interval lies above `
      + `${data.threshold}, fails when below); ${agree} of ${cell.seeds.length} seeds above ${data.threshold}.`;
    h.className = 'rx-summary';
    detail.appendChild(h);
    const table = document.createElement('table'), head = table.insertRow();
    ['seed', ...cell.columns].forEach(c => { const th = document.createElement('th'); th.textContent = c; head.appendChild(th); });
    cell.seeds.forEach(s => { const r = table.insertRow(); r.className = 'rx-seed';
      ['seed', ...cell.columns].forEach(c => { r.insertCell().textContent = fmt(s[c]); }); });
    detail.appendChild(table);
    const svg = curves(cell);
    if (svg) detail.appendChild(svg);
  }
  function draw() {
    panels.innerHTML = ''; detail.textContent = 'Click a cell to see its seeds.';
    const steps = data.steps[pick.value], w = 56, h = 40, left = 50, top = 22;
    data.panels.forEach(([dataset, N]) => {
      const svg = el('svg', {width: Math.max(left + w * steps.length + 10, 300), height: top + h * data.qk.length + 40});
      svg.appendChild(el('text', {x: left, y: 14, 'font-size': 12}, `${dataset}, N = ${N}`));
      data.qk.forEach((q, i) => svg.appendChild(el('text', {x: left - 6, y: top + h * (data.qk.length - i - 0.5) + 4,
          'text-anchor': 'end', 'font-size': 11}, fmt(q))));
      steps.forEach((f, j) => svg.appendChild(el('text', {x: left + w * (j + 0.5), y: top + h * data.qk.length + 14,
          'text-anchor': 'middle', 'font-size': 11}, fmt(f))));
      svg.appendChild(el('text', {x: left, y: top + h * data.qk.length + 32, 'font-size': 10}, data.xlabel[pick.value] + '; y: Q/K scale'));
      data.cells.filter(c => c.protocol === pick.value && c.claim === claim.value && c.dataset === dataset && c.N === N)
        .forEach(cell => {
          const i = data.qk.indexOf(cell.qk), j = steps.indexOf(cell.step);
          if (i < 0 || j < 0) return;
          const x = left + w * j, y = top + h * (data.qk.length - i - 1);
          const g = el('g', {class: 'rx-cell', tabindex: 0, role: 'button', 'data-verdict': cell.verdict,
              'aria-label': `${dataset} N=${N} Q/K ${fmt(cell.qk)} step ${fmt(cell.step)}: ${cell.verdict}, median ${fmt(cell.effect)}`});
          g.appendChild(el('rect', {x: x + 1, y: y + 1, width: w - 2, height: h - 2, fill: colour[cell.verdict], stroke: '#fff'}));
          g.appendChild(el('text', {x: x + w / 2, y: y + h / 2 - 2, 'text-anchor': 'middle', 'font-size': 13}, data.letter[cell.verdict]));
          g.appendChild(el('text', {x: x + w / 2, y: y + h / 2 + 12, 'text-anchor': 'middle', 'font-size': 10}, fmt(cell.effect)));
          g.addEventListener('click', () => show(cell, g));
          g.addEventListener('keydown', e => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); show(cell, g); } });
          svg.appendChild(g);
        });
      panels.appendChild(svg);
    });
  }
  pick.addEventListener('change', draw); claim.addEventListener('change', draw);
  draw();
})();
"""


def explorer_html(results=None, *, data: dict | None = None, **kwargs) -> str:
    """A self-contained HTML fragment of the explorable map (from ``results`` or ready ``data``,
    see :func:`explorer_data`); each call gets its own element ids, so a page may hold several."""
    data = explorer_data(results, **kwargs) if data is None else data
    uid = f"resgd-explorer-{uuid.uuid4().hex[:8]}"
    payload = json.dumps(data, ensure_ascii=False, allow_nan=False).replace("</", "<\\/")
    title = html.escape(f"Explore the map: the seeds behind each cell (T = {data['horizon']}, measure {data['measure']})")
    return (f'<div class="resgd-explorer" id="{uid}">\n<style>{STYLE}</style>\n'
            f'<p class="rx-title"><strong>{title}</strong></p>\n'
            '<div class="rx-controls"><label>protocol <select class="rx-protocol"></select></label>'
            '<label>claim <select class="rx-claim"></select></label></div>\n'
            '<div class="rx-panels"></div>\n<div class="rx-detail" aria-live="polite"></div>\n'
            f'<script type="application/json" id="{uid}-data">{payload}</script>\n'
            f'<script>{SCRIPT.replace("ROOT_ID", json.dumps(uid))}</script>\n</div>\n')
