"""Every figure that :mod:`interp.plots` draws, written as its HTML page and rendered by headless
Chromium, one screenshot each: a figure that stops drawing (a plotly error, a trace that no
longer shows) comes out blank. What the figures should look like (ticks, ranges, colour
scales, names) is checked on the figure objects in test_plots.py, without a browser.

The pages are laid out as frames of one page and rendered in one Chromium run (one run per
page would cost about 2 s each); each figure's screenshot is cut out of it by its frame and
kept under pytest's tmp_path (``screenshots/NAME.png``) to look at."""

import html

import matplotlib.image
import numpy as np
import plotly.graph_objects as go
import pytest

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
