"""report.html: one self-contained page of titled sections, each a text on how to read it and
its figures (plotly, with plotly.js inline once) and tables."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from plotly.offline import get_plotlyjs

from interp import plots


@dataclass
class Section:
    """One part of report.html: a title, what it shows and how to read it, then its figures
    and tables (HTML fragments), or the reason it was skipped."""

    title: str
    text: str
    body: list[str] = field(default_factory=list)
    skipped: str | None = None


def table_html(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", classes="table", border=0)


STYLE = """
body { font-family: system-ui, sans-serif; color: #222; margin: 0 auto; max-width: 1600px; padding: 0 24px 48px; }
h1 { font-size: 1.6em; margin-top: 28px; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 4px; margin-top: 40px; }
p.what { color: #444; max-width: 900px; line-height: 1.45; } p.skipped { color: #a0522d; font-style: italic; }
.meta { color: #555; font-size: 0.92em; } code { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; }
table.table { border-collapse: collapse; font-size: 0.9em; margin: 8px 0 16px; }
table.table th, table.table td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }
nav a { margin-right: 14px; } img { max-width: 100%; } .figure { overflow-x: auto; margin: 8px 0 20px; }
"""


def render_html(title: str, meta: list[str], sections: list[Section]) -> str:
    """One self-contained page: plotly.js inline once in the head, every figure after it."""
    nav = " ".join(f'<a href="#s{i}">{html.escape(s.title)}</a>' for i, s in enumerate(sections))
    parts = []
    for i, s in enumerate(sections):
        body = (f'<p class="skipped">Skipped: {html.escape(s.skipped)}</p>' if s.skipped
                else "".join(f'<div class="figure">{b}</div>' for b in s.body))
        parts.append(f'<section id="s{i}"><h2>{html.escape(s.title)}</h2><p class="what">{s.text}</p>{body}</section>')
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{STYLE}</style><script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            f'<h1>{html.escape(title)}</h1>{"".join(f"<p class=meta>{m}</p>" for m in meta)}<nav>{nav}</nav>'
            f'{"".join(parts)}</body></html>')


@dataclass
class Figures:
    """Draws the report's plots: ``figures(make, png)`` is ``make(backend)``'s plotly figure as
    HTML, with its matplotlib twin saved as ``out_dir / png`` (recorded in ``files``) when named."""

    out_dir: Path
    files: dict[str, Path]

    def __call__(self, make: Callable, png: str | None = None) -> str:
        if png:
            self.files[png.removesuffix(".png")] = plots.save(make("matplotlib"), self.out_dir / png)
        return plots.to_html(make("plotly"), include_plotlyjs=False)
