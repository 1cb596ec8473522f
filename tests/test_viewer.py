"""The head viewer: one panel per (layer, head, sequence), controls that reach each of them,
hover that names the tokens, and the plots module's colour rules."""

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from IPython.core.formatters import DisplayFormatter

from interp import plots
from interp.tasks.text import parse_sequence
from interp.viewer import head_viewer

TEXTS = ["w1i0i1r1w0r0i1r0", "w0r0i1i0w1r1i0r1", "w1w0r0i1i0i1r0r0"]
TOKENS = torch.stack([torch.as_tensor(parse_sequence(t)).long() for t in TEXTS])     # [3, 16]
BATCH, T = TOKENS.shape


def maps(n_layers=2, n_heads=3, signed=False):
    """``{layer: [batch, head, T, T]}`` causal maps whose every entry is unique and non-zero."""
    g = torch.Generator().manual_seed(0)
    layers = {}
    for layer in range(n_layers):
        m = (torch.rand(BATCH, n_heads, T, T, generator=g) + 0.1).tril()
        layers[layer] = m - 0.6 * torch.ones(T, T).tril() if signed else m
    return layers


def go_scale(colours):
    """``colours`` as plotly stores a heatmap's colour scale."""
    return go.Heatmap(colorscale=colours).colorscale


def heatmap_traces(fig):
    return [t for t in fig.data if t.type == "heatmap" and t.name != "exact zero"]


def test_one_panel_per_layer_head_and_sequence():
    fig = head_viewer(maps(), TOKENS)
    keys = sorted((t.meta["layer"], t.meta["head"], t.meta["seq"]) for t in heatmap_traces(fig))
    assert keys == [(layer, head, s) for layer in range(2) for head in range(3) for s in range(BATCH)]
    chosen = head_viewer(maps(), TOKENS, layers=[1], heads=[0, 2], seqs=[2])
    assert {(t.meta["layer"], t.meta["head"], t.meta["seq"]) for t in heatmap_traces(chosen)} == {(1, 0, 2), (1, 2, 2)}


def test_the_panel_holds_its_map():
    m = maps()
    fig = head_viewer(m, TOKENS)
    trace = next(t for t in heatmap_traces(fig) if (t.meta["layer"], t.meta["head"], t.meta["seq"]) == (1, 2, 1))
    np.testing.assert_allclose(np.nan_to_num(np.asarray(trace.z, dtype=float)), m[1][1, 2].numpy(), rtol=1e-6)


def test_dropdown_shows_exactly_the_chosen_head():
    fig = head_viewer(maps(), TOKENS)
    menu, = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == [f"layer {l}, head {h}" for l in range(2) for h in range(3)]
    for button in menu.buttons:
        layer, head = (int(word.strip(",")) for word in button.label.split()[1::2])
        visible = button.args[0]["visible"]
        assert len(visible) == len(fig.data)
        for trace, shown in zip(fig.data, visible):
            if "layer" in trace.meta:       # the head's maps of every sequence, no other head's
                assert shown == ((trace.meta["layer"], trace.meta["head"]) == (layer, head))
            else:                           # read marks: the same for every head
                assert shown
    # The figure opens on the first button's state.
    assert [t.visible is not False for t in fig.data] == list(menu.buttons[0].args[0]["visible"])


def test_slider_moves_the_axes_onto_one_sequence():
    fig = head_viewer(maps(), TOKENS, window=(2, 14))
    slider, = fig.layout.sliders
    n_shown = 12
    categories = list(fig.layout.xaxis.categoryarray)
    for i, step in enumerate(slider.steps):
        lo, hi = step.args[0]["xaxis.range"]
        assert step.args[0]["yaxis.range"] == [hi, lo]           # queries top to bottom
        shown = categories[int(lo + 0.5):int(hi + 0.5)]
        assert len(shown) == n_shown and all(name.startswith(f"seq {i} · ") for name in shown)
        # every trace of sequence i sits on those categories
        for trace in fig.data:
            if trace.meta["seq"] == i and trace.type == "heatmap":
                assert list(trace.x) == shown and list(trace.y) == shown
    assert list(fig.layout.xaxis.range) == slider.steps[0].args[0]["xaxis.range"]


def test_hover_names_the_query_and_key_tokens_and_positions():
    fig = head_viewer(maps(), TOKENS)
    trace = heatmap_traces(fig)[0]
    assert "query %{y}" in trace.hovertemplate and "key %{x}" in trace.hovertemplate and "%{z" in trace.hovertemplate
    assert trace.y[6] == "seq 0 · 6:r (r1)" and trace.x[4] == "seq 0 · 4:i (i1)"
    assert "seq 1 · 0:w (w0)" in heatmap_traces(fig)[1].x


def test_colour_scale_diverges_around_zero_for_signed_maps():
    signed = heatmap_traces(head_viewer(maps(signed=True), TOKENS))
    assert all(t.zmin == -t.zmax for t in signed)
    assert [list(c) for c in signed[0].colorscale] == [list(c) for c in go_scale(plots.DIVERGING[1])]
    plain = heatmap_traces(head_viewer(maps(), TOKENS))
    assert all(t.zmin == 0 for t in plain)
    assert [list(c) for c in plain[0].colorscale] == [list(c) for c in go_scale(plots.SEQUENTIAL[1])]
    # one scale for every panel, whatever head or sequence is shown
    assert len({(t.zmin, t.zmax) for t in signed}) == 1


def test_takes_a_cache_of_hook_names():
    m = maps()
    cache = {f"blocks.{layer}.attn.hook_pattern": a for layer, a in m.items()}
    assert len(head_viewer(cache, TOKENS).data) == len(head_viewer(m, TOKENS).data)


@pytest.mark.parametrize("choice, message", [(dict(layers=[2]), "layers [2] not in the maps"),
                                             (dict(heads=[3]), "heads [3] not in the maps"),
                                             (dict(heads=[-1]), "heads [-1] not in the maps"),
                                             (dict(seqs=[5]), "sequences [5] not in the maps"),
                                             (dict(layers=[]), "layers [] not in the maps")])
def test_bad_indices_say_what_exists(choice, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        head_viewer(maps(), TOKENS, **choice)


def test_a_tasks_tokens_are_its_own():
    """The automaton's inputs are labelled 0 1 _, not read as flip-flop's w r i; counting's by its
    operations."""
    automaton = torch.tensor([[0, 2, 1, 2, 2, 0, 1, 2, 0, 2, 2, 1, 0, 2, 1, 2]] * BATCH)
    fig = head_viewer(maps(), automaton, task="automaton")
    names = heatmap_traces(fig)[0].x
    assert [name.split(":", 1)[1].split()[0] for name in names[:4]] == ["0", "_", "1", "_"]
    assert not any(":w" in name or ":r" in name for name in names)
    counting = torch.tensor([[1, 6, 0, 6] * 4] * BATCH)     # a=0 a++ pass a++ ...
    assert heatmap_traces(head_viewer(maps(), counting, task="counting"))[0].x[1].endswith("a++")
    with pytest.raises(ValueError, match="give the tokens too"):
        head_viewer(maps(), task="automaton")


def test_tokens_must_match_the_maps():
    with pytest.raises(ValueError, match="tokens must be"):
        head_viewer(maps(), TOKENS[:, :-2])


def test_every_plots_figure_shows_itself_inline():
    """A matplotlib figure of interp.plots formats as a PNG without %matplotlib inline; an inline
    figure carries the plotly JSON and that PNG in one output."""
    formatter = DisplayFormatter()
    data, _ = formatter.format(plots.heatmap(maps()[0][0, 0], TOKENS[0], backend="matplotlib"))
    assert data["image/png"][:4] == b"\x89PNG"
    data, _ = formatter.format(plots.InlineFigure(head_viewer(maps(), TOKENS),
                                                  plots.attention_grid(maps(), TOKENS[0], backend="matplotlib")))
    assert {"application/vnd.plotly.v1+json", "image/png", "text/plain"} <= set(data)
    assert data["application/vnd.plotly.v1+json"]["layout"]["sliders"]
