"""Every figure that :mod:`interp.plots` draws, written as its HTML page and rendered by headless
Chromium, one screenshot each: a figure that stops drawing (a plotly error, a trace that no
longer shows) comes out blank. What the figures should look like (ticks, ranges, colour
scales, names) is checked on the figure objects in test_plots.py, without a browser.

The pages are laid out as frames of one page and rendered in one Chromium run (one run per
page would cost about 2 s each); each figure's screenshot is cut out of it by its frame and
kept under pytest's tmp_path (``screenshots/NAME.png``) to look at."""

import html
import json
import re

import matplotlib.image
import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from interp import plots
from support import chromium, needs_chromium, plot_gallery

pytestmark = [pytest.mark.browser, pytest.mark.integration, needs_chromium]

HEADER_PX = 200             # a page's title and caption above its figure
CHART_WIDTH = 900           # a frame for a chart without a width of its own


def drawn(pixels: np.ndarray) -> bool:
    """Whether a screenshot shows a figure: saturated pixels (traces, colour scales; a line
    with its markers alone has several hundred), which a page of text, axes and grid lines
    has next to none of (5 on the empty figure's)."""
    rgb = pixels[..., :3].reshape(-1, 3).astype(np.int64)
    return (rgb.max(1) - rgb.min(1) >= 60).sum() >= 200


def test_every_figure_renders_in_headless_chromium(tmp_path):
    figures = {**plot_gallery(), "empty": go.Figure()}        # the control: its screenshot must look blank
    frames, top = {}, 0
    for name, fig in figures.items():
        page = plots.save(fig, tmp_path / f"{name}.html", title=name, caption=f"plots.{name} on synthetic inputs",
                          shared_plotlyjs=True)
        width, height = fig.layout.width or CHART_WIDTH, (fig.layout.height or plots.CHART_HEIGHT_PX) + HEADER_PX
        frames[name] = (page, top, width + 60, height)
        top += height
    width = max(w for _, _, w, _ in frames.values())
    gallery = tmp_path / "gallery.html"
    gallery.write_text("<!DOCTYPE html><html><body style='margin:0'>" + "".join(
        f'<iframe src="{page.name}" title="{html.escape(name)}" style="position:absolute; left:0; top:{top}px; '
        f'width:{w}px; height:{h}px; border:0"></iframe>' for name, (page, top, w, h) in frames.items())
        + "</body></html>")
    shot = tmp_path / "gallery.png"
    chromium(tmp_path, "--virtual-time-budget=30000", f"--window-size={width},{top}", f"--screenshot={shot}",
             gallery.as_uri())
    pixels = (matplotlib.image.imread(shot) * 255).astype(np.uint8)
    assert pixels.shape[:2] == (top, width)
    (tmp_path / "screenshots").mkdir()
    blank = []
    for name, (_, y, w, h) in frames.items():
        crop = pixels[y:y + h, :w]
        matplotlib.image.imsave(tmp_path / "screenshots" / f"{name}.png", crop)
        if not drawn(crop):
            blank.append(name)
    assert blank == ["empty"], f"blank screenshots in {tmp_path / 'screenshots'}"


# --- The diagnosis report at the width of a laptop's browser window -----------------------------

WINDOW_PX = 1400

# Once the report has drawn its figures: the page's width, every element that reaches past the
# window (or, for a figure's text, past its figure), text under 10 px, and legend entries or
# colour bars without a name, written onto <html> for --dump-dom.
LAYOUT_PROBE = """<script>
addEventListener("error", e => document.documentElement.setAttribute("data-error", e.message));
addEventListener("unhandledrejection", e => document.documentElement.setAttribute("data-error", String(e.reason)));
addEventListener("load", () => {
  const root = document.documentElement;
  const check = () => {
    if (root.dataset.figures !== "drawn") return setTimeout(check, 100);
    const outside = [], small = [], unnamed = [];
    const name = el => el.tagName + (el.id ? "#" + el.id : "") + "." + (el.getAttribute("class") || "");
    for (const el of document.querySelectorAll("body *")) {
      const box = el.getBoundingClientRect();
      if (el.closest("#js-plotly-tester") || (box.width === 0 && box.height === 0)) continue;
      if (box.left < -0.5 || box.right > innerWidth + 0.5)
        outside.push(name(el) + " at x " + box.left + ".." + box.right);
    }
    for (const div of document.querySelectorAll(".plotly-graph-div")) {
      const frame = div.getBoundingClientRect();
      for (const text of div.querySelectorAll("text")) {
        if (!text.textContent.trim()) continue;
        const box = text.getBoundingClientRect();
        if (box.left < frame.left - 0.5 || box.right > frame.right + 0.5 || box.top < frame.top - 0.5 ||
            box.bottom > frame.bottom + 0.5) outside.push("'" + text.textContent + "' of " + div.id);
        if (parseFloat(getComputedStyle(text).fontSize) < 10) small.push("'" + text.textContent + "' of " + div.id);
      }
      for (const entry of div.querySelectorAll(".legendtext"))
        if (/^trace \\d+$/.test(entry.textContent)) unnamed.push(entry.textContent + " in " + div.id);
      for (const bar of div.querySelectorAll(".colorbar"))
        if (!bar.querySelector(".cbtitle text")?.textContent.trim()) unnamed.push("a colour bar of " + div.id);
    }
    root.setAttribute("data-layout", JSON.stringify({scrollWidth: root.scrollWidth, height: root.scrollHeight,
                                                     figures: document.querySelectorAll(".main-svg").length,
                                                     outside, small, unnamed}));
  };
  check();
});
</script>"""


@pytest.fixture(scope="module")
def tda_report(tmp_path_factory):
    """report.html of tda-mech, the widest of the specimens' (4 heads, two views beside each
    pattern), at the default probe length and heatmap window; one sequence per split and one per
    length keep it quick (the figures are the same size with more)."""
    from interp.diagnose import diagnose
    from models import pretrained

    out = tmp_path_factory.mktemp("tda-report")
    return diagnose(pretrained.path("tda-mech"), out, n=1, lengths=(512,), n_cache_sequences=1).files["report"]


def test_the_diagnosis_report_fits_a_1400_px_window(tda_report, tmp_path):
    source = tda_report.read_text()
    assert "<title>GlitchLens diagnosis: tda-mech (tda)</title>" in source    # the specimen, not the mechanism
    assert tda_report.stat().st_size < 3_000_000
    probed = tmp_path / "probed.html"
    probed.write_text(source.replace("<head>", "<head>" + LAYOUT_PROBE, 1))
    dom = chromium(tmp_path, "--virtual-time-budget=30000", f"--window-size={WINDOW_PX},1000", "--dump-dom",
                   probed.as_uri()).stdout
    root = re.search(r"<html([^>]*)>", dom)[1]
    assert "data-error" not in root, html.unescape(root)
    layout = json.loads(html.unescape(re.search(r'data-layout="([^"]*)"', root)[1]))
    assert layout["figures"] >= 2 * source.count('class="plotly-graph-div"') >= 2 * 10  # every figure drawn
    assert layout["scrollWidth"] <= WINDOW_PX and layout["outside"] == [], layout["outside"]
    assert layout["small"] == [] and layout["unnamed"] == [], (layout["small"], layout["unnamed"])
    shot = tmp_path / "report.png"                # the whole page, to look at
    chromium(tmp_path, "--virtual-time-budget=30000", f"--window-size={WINDOW_PX},{layout['height']}",
             f"--screenshot={shot}", tda_report.as_uri())
    pixels = (matplotlib.image.imread(shot) * 255).astype(np.uint8)
    assert pixels.shape[:2] == (layout["height"], WINDOW_PX) and drawn(pixels)


# --- The glitch browser: click a glitch, read what the page shows -------------------------------

# After the page has run: clicks the first glitch that has details, hovers its query token, and
# writes onto <html> what the page then shows (for --dump-dom).
CLICK_PROBE = """<script>
addEventListener("error", e => document.documentElement.setAttribute("data-error", e.message));
addEventListener("load", () => {
  const root = document.documentElement;
  const listed = [...document.querySelectorAll("nav button")];
  const button = listed.find(b => !b.disabled);
  button.click();
  document.querySelector(".tokens span.query").dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
  const rows = table => [...table.querySelectorAll("tr")].slice(1).map(tr => [...tr.cells].map(td => td.textContent));
  root.setAttribute("data-shown", JSON.stringify({
    clicked: button.textContent, selected: button.classList.contains("selected"),
    listed: listed.length, detailed: listed.filter(b => !b.disabled).length,
    splits: [...document.querySelectorAll("nav h2")].map(h => h.textContent),
    title: document.getElementById("glitch-title").textContent,
    tokens: [...document.querySelectorAll(".tokens span")].map(s => [s.textContent, s.title]),
    maps: Object.fromEntries([...document.querySelectorAll("table.map")].map(t => [t.dataset.map, rows(t)])),
    dla: rows(document.querySelector("table.dla")), patching: rows(document.querySelector("table.patching")),
    hovered: document.getElementById("hovered").textContent}));
});
</script>"""


def shown_after_a_click(page, tmp_path) -> dict:
    probed = tmp_path / "clicked.html"
    probed.write_text(page.read_text().replace("</body>", CLICK_PROBE + "</body>", 1))
    dom = chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()).stdout
    root = re.search(r"<html([^>]*)>", dom)[1]
    assert "data-error" not in root, html.unescape(root)
    return json.loads(html.unescape(re.search(r'data-shown="([^"]*)"', root)[1]))


def test_clicking_a_glitch_shows_its_attention_dla_and_patching(tmp_path):
    """A tiny untrained model of the parity task (``tests/plugin_tasks.py``): the page lists the
    glitches of both splits; a click on the first shows its tokens (hoverable), every layer's and
    head's row of each attention hook at its position, and its DLA and patching, as the
    diagnosis computed them."""
    from plugin_tasks import ParityTask

    import models
    from interp.diagnose import diagnose
    from interp.diagnose.browser import PER_SPLIT
    from interp.tasks import registry

    saved = dict(registry._TASKS)
    registry.register_task(ParityTask())
    try:
        torch.manual_seed(0)
        model = models.build_model(models.ModelConfig.from_preset("rope", "tiny", n_heads=2, d_vocab=3, n_ctx=18))
        checkpoint = models.save(tmp_path / "ckpt", model, training={"config": {"task": "parity"}, "step": 0})
        result = diagnose(checkpoint, tmp_path / "out", n=16)
    finally:
        registry._TASKS.clear()
        registry._TASKS.update(saved)
    page = result.files["browser"]
    source = page.read_text()
    assert not re.search(r"""(src|href)=["']?https?:""", source)   # nothing from the network
    shown = shown_after_a_click(page, tmp_path)
    glitch = result.metrics["at_glitch"]
    counts = result.glitches.split.value_counts()
    assert shown["splits"] == [f"{split}: {counts[split]} glitches" for split in ("iid", "long")]
    detailed = sum(min(count, PER_SPLIT) for count in counts)
    assert shown["listed"] == len(result.glitches) > detailed == shown["detailed"] and shown["selected"]
    assert shown["title"].startswith(f"{glitch['split']}, sequence {glitch['seq']}, position {glitch['position']}: "
                                     f"right answer {glitch['target']}, predicted {glitch['predicted']}")
    tokens = ParityTask().load_split(glitch["split"], glitch["seq"] + 1)[glitch["seq"], :glitch["position"] + 1]
    assert [t for t, _ in shown["tokens"]] == ParityTask().labels(tokens)
    assert shown["tokens"][-1][1] == shown["hovered"] == f"position {glitch['position']}: ?"
    assert set(shown["maps"]) == {"pattern", "attn_scores", "attn_logits"}
    assert [row[0] for row in shown["maps"]["pattern"]] == ["L0 H0", "L0 H1", "L1 H0", "L1 H1"]
    # the keys each head weighs most, as the report's table names them
    keys = lambda text: [key.rsplit(" ", 1)[0] for key in text.split(", ")]    # "position (token)"
    assert [keys(row[2]) for row in shown["maps"]["pattern"]] == [keys(h["keys"]) for h in glitch["heads"]]
    assert [[c, float(v)] for c, v in shown["dla"]] == glitch["dla"]
    assert [[c, float(v)] for c, v in shown["patching"]] == glitch["patching"]
