"""Where a drawn figure goes: an HTML page with its title and caption, a file, a report's HTML
fragment, or a notebook output that is interactive where it can be and a PNG elsewhere."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from interp.plots.render_matplotlib import StaticFigure

CHART_HEIGHT_PX = 600     # a page's figure without a height of its own (plotly would draw 450)
PAGE_STYLE = ("body { font-family: system-ui, sans-serif; color: #222; margin: 16px 24px; } "
              "p.caption { color: #444; max-width: 900px; line-height: 1.45; }")


def html_page(fig: go.Figure, title: str, caption: str = "", include_plotlyjs: bool | str = True,
              div_id: str | None = None) -> str:
    """A page of one plotly figure: ``title`` as the page's <title> and its heading, the
    ``caption`` paragraph under it, then the figure. ``include_plotlyjs`` as plotly's
    ``to_html`` (``"directory"``: a ``plotly.min.js`` beside the page)."""
    figure = fig.to_html(include_plotlyjs=include_plotlyjs, full_html=False, div_id=div_id,
                         default_height=f"{CHART_HEIGHT_PX}px")
    text = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{PAGE_STYLE}</style></head>\n<body>\n<h1>{html.escape(title)}</h1>\n{text}\n{figure}\n'
            '</body>\n</html>\n')


def save(fig, path, *, title: str | None = None, caption: str = "", shared_plotlyjs: bool = False,
         div_id: str | None = None) -> Path:
    """Write a figure: plotly to an ``.html`` page (:func:`html_page`; the title defaults to the
    figure's, else the file name) or ``.json``; matplotlib to ``.png``/``.pdf``/``.svg``. A page
    opens offline: plotly.js is inline, or with ``shared_plotlyjs`` one ``plotly.min.js``
    beside the pages of a folder. Missing folders of ``path`` are made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(fig, go.Figure):
        if path.suffix == ".html":
            title = title or fig.layout.title.text or path.stem
            path.write_text(html_page(fig, title, caption, "directory" if shared_plotlyjs else True, div_id),
                            encoding="utf-8")
            bundle = path.parent / "plotly.min.js"
            if shared_plotlyjs and not bundle.exists():
                bundle.write_text(get_plotlyjs(), encoding="utf-8")
        elif path.suffix == ".json":
            fig.write_json(path)
        else:
            raise ValueError(f"plotly figures save as .html or .json, not {path.suffix!r}; "
                             "draw static images with backend='matplotlib'")
    else:
        fig.savefig(path, dpi=150)
    return path


def to_html(fig, include_plotlyjs: bool = True) -> str:
    """An HTML fragment for a report: a plotly figure as a ``div`` (with plotly.js inline when
    ``include_plotlyjs``: once per page is enough), a matplotlib figure as an inline PNG."""
    if isinstance(fig, go.Figure):
        return fig.to_html(include_plotlyjs=include_plotlyjs, full_html=False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    return f'<img alt="figure" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


@dataclass
class InlineFigure:
    """A plotly figure in a notebook with a static PNG of the same data beside it, in one output:
    a frontend that runs JavaScript (JupyterLab, VS Code) draws the interactive figure, and a
    page that does not (a code host's notebook view, nbconvert's HTML) shows the image. The
    output holds the figure's JSON, not plotly.js, which the frontend brings."""

    interactive: go.Figure
    static: StaticFigure

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        title = self.interactive.layout.title.text or "figure"
        return {**pio.renderers["plotly_mimetype"].to_mimebundle(self.interactive.to_dict()),
                "image/png": base64.b64encode(self.static._repr_png_()).decode("ascii"),
                "text/plain": f"<interactive figure: {title}>"}


def inline(plot, *args, **options) -> InlineFigure:
    """``plot(*args, **options)`` (any plot of :mod:`interp.plots`) drawn by both backends, for a
    notebook output that is interactive where it can be and a PNG elsewhere."""
    return InlineFigure(plot(*args, backend="plotly", **options), plot(*args, backend="matplotlib", **options))
