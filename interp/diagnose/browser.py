"""The glitch browser: one self-contained HTML page per checkpoint (``browser.html`` of
``glitchlens diagnose``) that lists the glitches of every split and, for the glitch one clicks,
shows what every layer and head did at its position.

For each split the first :data:`PER_SPLIT` glitches are detailed (the page lists the first
:data:`LISTED`, says how many there are, and which have no details): the sequences that hold them are run once more with a cache,
and at each glitch's query position the page keeps, for every layer, head and attention hook
of the model with a key axis (``hook_pattern``, and the mechanism's own: TRA's ``dbar``,
``mask`` and ``attn_scores``, FoT's ``decay_bias``, CoPE's ``gates`` and ``positions``,
Differential and TDA's ``view_1`` and ``view_2``, and per key ``forget`` or ``threshold``: whatever
the cache holds), the row over the :data:`WINDOW` keys up to the query. Beside them, each
glitch's direct logit attribution and patching (:mod:`interp.diagnose.circuits`), when the
diagnosis computed them. Every token is hoverable (its position and string).

No network: the data is a JSON block inside the page and the script and styles are inline.
"""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pandas as pd
import torch

PER_SPLIT = 5        # glitches per split with their attention rows, DLA and patching
LISTED = 200         # glitches per split listed
WINDOW = 128         # keys up to the query shown per row
DECIMALS = 4
MAP_HOOK = re.compile(r"blocks\.(\d+)\.attn\.hook_(\w+)")
# hooks of the attention's inputs and outputs, not maps over keys
NOT_MAPS = {"q", "k", "v", "q2", "k2", "z", "result", "lambda"}


def _rounded(x: torch.Tensor) -> list:
    """``x`` as a list of rounded floats, None where it is not finite (a key masked to -inf)."""
    values = np.round(x.double().cpu().numpy(), DECIMALS)
    return [float(v) if np.isfinite(v) else None for v in values]


@torch.no_grad()
def attention_rows(model, inputs: np.ndarray, positions: np.ndarray) -> list[dict]:
    """For each sequence ``inputs[b]`` and query ``positions[b]``: ``{"start": first key shown,
    "maps": {name: [[layer, head, [value per key]]]}}``, every attention hook with a key axis
    (``[batch, head, query_pos, key_pos]``: the query's row; ``[batch, head, key_pos]``: the
    keys' values), over the :data:`WINDOW` keys up to the query."""
    stop = int(positions.max()) + 1
    tokens = torch.as_tensor(np.asarray(inputs)[:, :stop].astype(np.int64), device=next(model.parameters()).device)
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: bool(MAP_HOOK.fullmatch(name)))
    found = []
    for b, pos in enumerate(int(p) for p in positions):
        start = max(0, pos + 1 - WINDOW)
        maps: dict[str, list] = {}
        for name, value in cache.items():
            layer, kind = MAP_HOOK.fullmatch(name).groups()
            if kind in NOT_MAPS:
                continue
            if value.ndim == 4 and value.shape[-1] == value.shape[-2] == stop:
                rows = value[b, :, pos, start:pos + 1]
            elif value.ndim == 3 and value.shape[-1] == stop:
                rows = value[b, :, start:pos + 1]
            else:
                continue
            maps.setdefault(kind, []).extend([int(layer), head, _rounded(row)] for head, row in enumerate(rows))
        order = sorted(maps, key=lambda k: (k != "pattern", k))
        found.append({"start": start, "maps": {k: maps[k] for k in order}})
    return found


def glitch_views(model, task, inputs_by_split: dict[str, np.ndarray], glitches: pd.DataFrame,
                 circuits=None) -> list[dict]:
    """The page's glitches: every row of ``glitches`` (columns ``split, seq, position, target,
    predicted`` and optionally ``margin``; target and predicted as the task's strings) up to
    :data:`LISTED` per split, the first :data:`PER_SPLIT` of each split with their tokens,
    attention rows and, from ``circuits(split, rows)`` (a callable returning ``{index: {"dla":
    [...], "patching": [...]}}`` for the rows of ``glitches`` it is given, or None), their DLA and
    patching."""
    views = []
    for split, rows in glitches.groupby("split", sort=False):
        rows = rows.head(LISTED)
        detailed = rows.head(PER_SPLIT)
        inputs = inputs_by_split[split]
        rows_of = attention_rows(model, inputs[detailed.seq.to_numpy()], detailed.position.to_numpy()) \
            if len(detailed) else []
        extra = circuits(split, detailed) if circuits is not None and len(detailed) else {}
        for k, (index, row) in enumerate(rows.iterrows()):
            view = {"split": split, "seq": int(row.seq), "position": int(row.position), "target": str(row.target),
                    "predicted": str(row.predicted),
                    "margin": None if pd.isna(row.get("margin", np.nan)) else round(float(row.margin), DECIMALS)}
            if k < len(detailed):
                att = rows_of[k]
                view |= {"tokens": task.labels(inputs[int(row.seq), att["start"]:int(row.position) + 1]),
                         **att, **extra.get(index, {})}
            views.append(view)
    return views


def render(title: str, subtitle: str, splits: dict[str, int], views: list[dict], skipped: dict[str, str]) -> str:
    """The page: ``splits`` ``{split: glitches in it}``, ``views`` from :func:`glitch_views`,
    ``skipped`` ``{part: reason}`` for the parts (DLA, patching) the diagnosis could not compute."""
    data = json.dumps({"splits": splits, "glitches": views, "skipped": skipped, "perSplit": PER_SPLIT},
                      allow_nan=False).replace("</", "<\\/")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p>"
            "<div id='page'><nav id='glitches'></nav><main id='detail'><p>Choose a glitch on the left.</p></main></div>"
            "<div id='hovered' aria-live='polite'></div>"
            f"<script type='application/json' id='data'>{data}</script><script>{SCRIPT}</script></body></html>")


STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em; color: #222; }
#page { display: flex; gap: 1.5em; align-items: flex-start; }
nav { width: 22em; flex: none; max-height: 90vh; overflow-y: auto; }
nav h2 { font-size: 15px; margin: .8em 0 .3em; }
nav button { display: block; width: 100%; text-align: left; border: 1px solid #ccd; background: #f7f7fb;
             margin: 2px 0; padding: 3px 6px; cursor: pointer; font: inherit; }
nav button.selected { background: #dde6ff; border-color: #558; }
nav button:disabled { color: #888; cursor: default; }
main { flex: 1; min-width: 0; }
.tokens span, .strip span { display: inline-block; text-align: center; }
.tokens span { min-width: 1.4em; border: 1px solid #eee; margin: 1px 0; font-family: monospace; }
.tokens span.query { border-color: #c00; font-weight: bold; }
.tokens span:hover, .strip span:hover { outline: 2px solid #333; }
.strip { white-space: nowrap; line-height: 0; }
.strip span { width: 6px; height: 14px; }
table { border-collapse: collapse; margin: .5em 0 1em; }
td, th { border: 1px solid #ddd; padding: 2px 6px; font-size: 13px; vertical-align: middle; }
th { background: #f3f3f3; text-align: left; }
#hovered { position: fixed; bottom: 0; right: 0; background: #ffd; padding: 4px 8px; border: 1px solid #cc9; }
.skipped { color: #855; }
"""

SCRIPT = """
const data = JSON.parse(document.getElementById("data").textContent);
const nav = document.getElementById("glitches"), detail = document.getElementById("detail");
const hovered = document.getElementById("hovered");
const el = (tag, attrs = {}, text = "") => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
};
const add = (parent, child) => { parent.append(child); return child; };   // append() returns nothing
const hoverable = (e, text) => {
  e.title = text;
  e.addEventListener("mouseover", () => { hovered.textContent = text; });
};
const colour = (v, scale) => {
  const a = scale > 0 ? Math.min(1, Math.abs(v) / scale) : 0;
  return v >= 0 ? `rgba(31, 90, 200, ${a})` : `rgba(200, 40, 40, ${a})`;
};
function show(index, button) {
  for (const b of nav.querySelectorAll("button")) b.classList.remove("selected");
  button.classList.add("selected");
  const g = data.glitches[index];
  detail.replaceChildren();
  detail.append(el("h2", {id: "glitch-title"}, `${g.split}, sequence ${g.seq}, position ${g.position}: ` +
    `right answer ${g.target}, predicted ${g.predicted}` + (g.margin === null ? "" : ` (margin ${g.margin})`)));
  const tokenOf = k => g.tokens[k - g.start];
  const strip = el("div", {class: "tokens"});
  g.tokens.forEach((t, i) => {
    const k = g.start + i, s = el("span", k === g.position ? {class: "query"} : {}, t);
    hoverable(s, `position ${k}: ${t}`);
    strip.append(s);
  });
  detail.append(el("h3", {}, `Tokens ${g.start} to ${g.position} (the query, outlined, is where the model answered)`),
                strip);
  for (const [name, rows] of Object.entries(g.maps)) {
    detail.append(el("h3", {}, `${name} at the query, every layer and head`));
    const table = el("table", {class: "map", "data-map": name});
    add(table, el("tr")).append(el("th", {}, "layer, head"), el("th", {}, `keys ${g.start} to ${g.position}`),
                                el("th", {}, "largest |value| at"));
    for (const [layer, head, values] of rows) {
      const scale = Math.max(...values.map(Math.abs));
      const cells = el("div", {class: "strip"});
      values.forEach((v, i) => {
        const s = el("span");
        s.style.background = colour(v, scale);
        hoverable(s, `L${layer} H${head} ${name}, key ${g.start + i} (${tokenOf(g.start + i)}): ${v}`);
        cells.append(s);
      });
      const top = values.map((v, i) => [Math.abs(v), i]).sort((a, b) => b[0] - a[0]).slice(0, 3)
        .map(([, i]) => `${g.start + i} (${tokenOf(g.start + i)}) ${values[i]}`).join(", ");
      const tr = el("tr", {"data-layer": layer, "data-head": head});
      tr.append(el("td", {}, `L${layer} H${head}`));
      add(tr, el("td")).append(cells);
      tr.append(el("td", {class: "top"}, top));
      table.append(tr);
    }
    detail.append(table);
  }
  for (const [part, title, column] of [["dla", "Direct logit attribution", "attribution"],
                                       ["patching", "Activation patching", "restored"]]) {
    detail.append(el("h3", {}, title));
    if (!g[part]) {
      detail.append(el("p", {class: "skipped"}, data.skipped[part] || "not computed for this glitch"));
      continue;
    }
    const table = el("table", {class: part});
    add(table, el("tr")).append(el("th", {}, "component"), el("th", {}, column));
    for (const [component, value] of g[part]) add(table, el("tr")).append(el("td", {}, component),
                                                                        el("td", {}, String(value)));
    detail.append(table);
  }
}
for (const [split, count] of Object.entries(data.splits)) {
  const listed = data.glitches.filter(g => g.split === split).length;
  nav.append(el("h2", {}, `${split}: ${count} glitch${count === 1 ? "" : "es"}` +
                          (listed < count ? ` (the first ${listed} listed)` : "")));
  data.glitches.forEach((g, i) => {
    if (g.split !== split) return;
    const b = el("button", {"data-glitch": i}, `seq ${g.seq}, pos ${g.position}: ${g.target} read as ${g.predicted}`);
    if (g.maps) b.addEventListener("click", () => show(i, b));
    else { b.disabled = true; b.title = `only the first ${data.perSplit} glitches of a split are detailed`; }
    nav.append(b);
  });
}
"""
