"""The robustness map as an explorable page widget: click a cell, see the seeds behind its verdict.

The phase diagrams (:mod:`.robustness`) show each cell's median and ✓/✗/?; a reader cannot see the
seeds that decided it. :func:`explorer_html` turns the data of
:func:`resgd.robustness.explorer.explorer_data` (per cell: the per-seed values the verdict was
computed from, the interval, the threshold, each seed's Φ(t)/Φ(0) at the map's horizons) into one
self-contained HTML fragment: inline SVG and vanilla JavaScript, no CDN, works offline, hidden in
print (where the static figure stands in). In a notebook::

    from IPython.display import HTML
    from resgd.plots.robustness_explorer import explorer_html
    from resgd.robustness.explorer import explorer_data
    HTML(explorer_html(explorer_data(results)))
"""

from __future__ import annotations

import html
import json
import uuid

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
  // a median at the log ratio's cap is a diverged run's cap, not a measured ratio: said wherever it is shown
  const median = c => fmt(c.effect) + (c.capped ? ' (cap)' : '');
  const el = (tag, attrs, text) => { const n = document.createElementNS(NS, tag);
      for (const k in attrs) n.setAttribute(k, attrs[k]); if (text !== undefined) n.textContent = text; return n; };
  const pick = root.querySelector('.rx-protocol'), claim = root.querySelector('.rx-claim');
  data.protocols.forEach(p => pick.add(new Option(p, p)));
  data.claims.forEach(c => claim.add(new Option(data.claim_text[c], c)));
  const panels = root.querySelector('.rx-panels'), detail = root.querySelector('.rx-detail');
  function curves(cell) {
    const size = [380, 150], pad = 30, all = [];
    cell.curves.forEach(line => { for (const s in line.points)
      line.points[s].forEach(p => { if (typeof p[1] === 'number' && p[1] > 0) all.push(p); }); });
    if (!all.length) return null;
    const tmax = Math.max(...all.map(p => p[0])), ys = all.map(p => Math.log10(p[1]));
    const ylo = Math.min(...ys), yhi = Math.max(...ys, ylo + 1e-3);
    const X = t => pad + (size[0] - pad - 5) * t / tmax, Y = y => 5 + (size[1] - pad) * (yhi - Math.log10(y)) / (yhi - ylo);
    const svg = el('svg', {width: size[0], height: size[1], class: 'rx-curves', role: 'img',
        'aria-label': 'Φ(t)/Φ(0) of each seed, log scale: ' + cell.curves.map(l => l.label).join(', ')});
    svg.appendChild(el('line', {x1: pad, y1: size[1] - pad + 5, x2: size[0] - 5, y2: size[1] - pad + 5, stroke: '#555'}));
    svg.appendChild(el('text', {x: pad, y: size[1] - 8, 'font-size': 10}, `t = 0 … ${tmax}; log Φ(t)/Φ(0) of each seed`));
    cell.curves.forEach(line => { for (const s in line.points) {
      const pts = line.points[s].filter(p => typeof p[1] === 'number' && p[1] > 0);
      if (pts.length < 2) continue;
      svg.appendChild(el('polyline', {points: pts.map(p => X(p[0]) + ',' + Y(p[1])).join(' '), fill: 'none',
          stroke: line.colour, 'stroke-width': 1, 'stroke-dasharray': line.dashed ? '3,2' : ''}));
    } });
    const box = document.createElement('div');
    box.appendChild(svg);
    const legend = document.createElement('p');
    legend.className = 'rx-legend';
    cell.curves.forEach(line => { const item = document.createElement('span');
      item.style.color = line.colour; item.style.marginRight = '1em';
      item.textContent = (line.dashed ? '- - ' : '—— ') + line.label; legend.appendChild(item); });
    box.appendChild(legend);
    return box;
  }
  function show(cell, g) {
    root.querySelectorAll('.rx-chosen').forEach(n => n.classList.remove('rx-chosen'));
    if (g) g.classList.add('rx-chosen');
    detail.innerHTML = '';
    const h = document.createElement('p');
    const level = v => v === null || v === undefined ? '–' : (100 * v).toFixed(1) + ' %';
    const counts = cell.parts.map(p => (cell.parts.length > 1 ? p.label + ': ' : '') + `${p.above} of ${p.seeds} seeds above ${data.threshold}`);
    const depth = cell.parts.length > 1
      ? '; every depth: ' + cell.parts.map(p => `${p.label} median ${fmt(p.effect)}, interval [${fmt(p.lo)}, ${fmt(p.hi)}]`).join('; ')
        + ` (the cell holds when every depth's interval lies above ${data.threshold}, fails when every one lies below; `
        + `its median is the median of the depths' medians)`
      : '';
    h.textContent = `${cell.dataset}, N = ${cell.N}, Q/K scale ${fmt(cell.qk)}, step ${fmt(cell.step)}, protocol '${cell.protocol}', T = ${data.horizon}: `
      + `${cell.verdict} ${data.letter[cell.verdict]} — median ${fmt(cell.effect)}`
      + (cell.capped ? ` (at the ±${data.cap} cap of a diverged run, not a measured ratio)` : '') + `, interval [${fmt(cell.lo)}, ${fmt(cell.hi)}] `
      + `(exact level ${level(cell.level)}; holds when the interval lies above ${data.threshold}, fails when below)`
      + depth + '; ' + counts.join(', ') + '.';
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
              'aria-label': `${dataset} N=${N} Q/K ${fmt(cell.qk)} step ${fmt(cell.step)}: ${cell.verdict}, median ${median(cell)}`});
          g.appendChild(el('rect', {x: x + 1, y: y + 1, width: w - 2, height: h - 2, fill: colour[cell.verdict], stroke: '#fff'}));
          g.appendChild(el('text', {x: x + w / 2, y: y + h / 2 - 2, 'text-anchor': 'middle', 'font-size': 13}, data.letter[cell.verdict]));
          g.appendChild(el('text', {x: x + w / 2, y: y + h / 2 + 12, 'text-anchor': 'middle', 'font-size': 10}, median(cell)));
          g.addEventListener('click', () => show(cell, g));
          g.addEventListener('keydown', e => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); show(cell, g); } });
          svg.appendChild(g);
        });
      panels.appendChild(svg);
    });
  }
  const about = root.querySelector('.rx-protocol-text');
  const describe = () => { about.textContent = data.protocol_text[pick.value] || pick.value; };
  pick.addEventListener('change', () => { describe(); draw(); }); claim.addEventListener('change', draw);
  root.querySelector('.rx-controls').hidden = false;
  describe();
  draw();
})();
"""


def static_table(data: dict) -> str:
    """Every cell of ``data`` as one HTML table (verdict, median, interval, seeds above the threshold,
    per depth for (c)): what a reader without JavaScript sees instead of the widget."""
    def fmt(v) -> str:
        return "–" if v is None else {"inf": "∞", "-inf": "−∞"}.get(v, f"{v:.3g}" if isinstance(v, float) else str(v))

    head = ("<tr><th>protocol</th><th>claim</th><th>data</th><th>N</th><th>Q/K</th><th>step</th><th>verdict</th>"
            "<th>median</th><th>interval</th><th>seeds above 0</th></tr>")
    rows = []
    for c in data["cells"]:
        above = ", ".join((f"{p['label']}: " if len(c["parts"]) > 1 else "") + f"{p['above']} of {p['seeds']}" for p in c["parts"])
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in (
            c["protocol"], c["claim"], c["dataset"], c["N"], fmt(c["qk"]), fmt(c["step"]), c["verdict"],
            fmt(c["effect"]) + (" (cap: a run diverged)" if c.get("capped") else ""),
            f"[{fmt(c['lo'])}, {fmt(c['hi'])}]", above)) + "</tr>")
    protocols = "".join(f"<li>{html.escape(text)}</li>" for text in data.get("protocol_text", {}).values())
    return (f"<p>Without JavaScript: every cell of the map at T = {data['horizon']} (claims: "
            + html.escape("; ".join(data["claim_text"].values())) + f").</p><ul>{protocols}</ul>"
            f"<table class=\"rx-static\">{head}{''.join(rows)}</table>")


def explorer_html(data: dict) -> str:
    """A self-contained HTML fragment of the explorable map (``data``:
    :func:`resgd.robustness.explorer.explorer_data`); each call gets its own element ids, so a page
    may hold several. Without JavaScript the controls stay hidden and a static table of every cell
    (:func:`static_table`) stands in."""
    uid = f"resgd-explorer-{uuid.uuid4().hex[:8]}"
    payload = json.dumps(data, ensure_ascii=False, allow_nan=False).replace("</", "<\\/")
    title = html.escape(f"Explore the map: the seeds behind each cell (T = {data['horizon']}, measure {data['measure']})")
    return (f'<div class="resgd-explorer" id="{uid}">\n<style>{STYLE}</style>\n'
            f'<p class="rx-title"><strong>{title}</strong></p>\n'
            '<div class="rx-controls" hidden><label>protocol <select class="rx-protocol"></select></label>'
            '<label>claim <select class="rx-claim"></select></label><p class="rx-protocol-text"></p></div>\n'
            '<div class="rx-panels"></div>\n<div class="rx-detail" aria-live="polite"></div>\n'
            f'<noscript>{static_table(data)}</noscript>\n'
            f'<script type="application/json" id="{uid}-data">{payload}</script>\n'
            f'<script>{SCRIPT.replace("ROOT_ID", json.dumps(uid))}</script>\n</div>\n')
