"""TransformerLens's own unit tests of hooks, in our words, on every shipped specimen, and what a
TransformerLens notebook reaches for first: ``embed.W_E``, ``unembed.W_U``, ``pos_embed``, the per-head
weights of ``blocks[l].attn``, text inputs (``model("w1r1")``), ``hook_rot_q`` / ``hook_rot_k`` on rotary
models; and no hook that is added and silently never runs.

The source of each ported test is named in its docstring (TransformerLens's repository,
``tests/unit/test_hooks.py`` and ``tests/unit/test_hook_points.py``). Those that cannot apply here,
and why:

- ``test_conditional_hooks``' second half (``hook_q_input`` after ``set_use_split_qkv_input(True)``):
  a block normalises its input once for every head (``set_use_split_qkv_input(True)`` is refused);
- ``model.forward(prompt)`` with a string: our ``forward`` takes token ids; the string goes through
  ``model(prompt)``, ``run_with_hooks`` and ``run_with_cache``, as the tests below call them;
- test_hook_points.py's ``enable_reshape`` tests: the bridge's tensor conversions, which a model
  built on ``HookedRootModule`` never sets, and its mocked ``RemovableHandle`` tests, which test
  PyTorch's handles rather than a model;
- ``tests/unit/test_activation_cache.py``: its expected values are those of the pretrained
  ``solu-1l``, which cannot be downloaded here; the same cache helpers are tested against sums
  computed by hand on every mechanism, in both norm placements, in ``tests/test_transformer_lens.py``.
"""

import warnings

import pytest
import torch

from models import ModelConfig, build_model, load_pretrained, pretrained
from models.lens import TLMeaningWarning

SPECIMENS = pretrained.built()
EMBED = "hook_embed"


def specimen(name):
    return load_pretrained(name)


def prompt_of(model) -> str:
    """A short text in the model's task's vocabulary."""
    return "w1i0r1w0r0" if "w" in model.vocab else "01_0_1"


class Counter:
    def __init__(self):
        self.count = 0

    def inc(self, activation, hook):
        self.count += 1


def embed_hooks(model) -> int:
    return len(model.hook_dict[EMBED].fwd_hooks)


@pytest.fixture(params=SPECIMENS)
def model(request):
    model = specimen(request.param)
    yield model
    model.remove_all_hook_fns(including_permanent=True)


def test_hook_attaches_normally(model):
    """Ported from TransformerLens tests/unit/test_hooks.py::test_hook_attaches_normally."""
    c = Counter()
    model.run_with_hooks(prompt_of(model), fwd_hooks=[(lambda name: name == EMBED, c.inc)])
    assert all(len(hp.fwd_hooks) == 0 for hp in model.hook_dict.values()) and c.count == 1


def test_perma_hook_attaches_normally_and_survives_remove_all(model):
    """Ported from test_hooks.py::test_perma_hook_attaches_normally and ::test_remove_hook."""
    c = Counter()
    model.add_perma_hook(EMBED, c.inc)
    model.run_with_hooks(prompt_of(model), fwd_hooks=[])
    assert embed_hooks(model) == 1 and c.count == 1
    model.remove_all_hook_fns()
    assert embed_hooks(model) == 1, "a permanent hook stays without including_permanent"
    model.remove_all_hook_fns(including_permanent=True)
    model.run_with_hooks(prompt_of(model), fwd_hooks=[])
    assert embed_hooks(model) == 0 and c.count == 1


def test_nested_hook_context_managers_and_a_failure_inside(model):
    """Ported from test_hooks.py::test_hook_context_manager, ::test_nested_hook_context_manager,
    ::test_context_manager_run_with_cache and ::test_nested_context_manager_with_failure."""
    c = Counter()

    def fail(activation, hook):
        raise RuntimeError("fail")

    with model.hooks(fwd_hooks=[(EMBED, c.inc)]):
        model(prompt_of(model))
        with model.hooks(fwd_hooks=[(EMBED, c.inc)]):
            assert embed_hooks(model) == 2
            model.run_with_cache(prompt_of(model))
        assert embed_hooks(model) == 1 and c.count == 3
        with pytest.raises(RuntimeError, match="fail"), model.hooks(fwd_hooks=[(EMBED, fail)]):
            model(prompt_of(model))
        assert embed_hooks(model) == 1
    assert embed_hooks(model) == 0


def test_hook_context_manager_with_permanent_hook_and_reset(model):
    """Ported from test_hooks.py::test_hook_context_manager_with_permanent_hook and
    ::test_reset_hooks_in_context_manager."""
    c = Counter()
    model.add_perma_hook(EMBED, c.inc)
    with model.hooks(fwd_hooks=[(EMBED, c.inc)]):
        model(prompt_of(model))
        model.reset_hooks()
        assert embed_hooks(model) == 1, "reset_hooks keeps the permanent hook"
    assert c.count == 2


def test_conditional_hooks_hook_result(model):
    """Ported from test_hooks.py::test_conditional_hooks (its hook_result half; TransformerLens raises
    an AssertionError, we a ValueError saying what to call)."""
    if not hasattr(model, "blocks"):
        pytest.skip("no attention")
    with pytest.raises(ValueError, match=r"set_use_attn_result\(True\)"):
        model.add_hook("blocks.0.attn.hook_result", lambda z, hook: z)
    model.set_use_attn_result(True)
    try:
        model.add_hook("blocks.0.attn.hook_result", lambda z, hook: z)
        _, cache = model.run_with_cache(prompt_of(model), names_filter="blocks.0.attn.hook_result")
        assert cache["blocks.0.attn.hook_result"].shape[2:] == (model.cfg.n_heads, model.cfg.d_model)
    finally:
        model.set_use_attn_result(False)


def test_prepending_hooks(model):
    """Ported from test_hooks.py::test_prepending_hooks: of two hooks on the last block's output, one
    zeroing it and one adding noise, the one added last with ``prepend`` runs first; the logits are the
    unembedding bias (zero) exactly when the zeroing hook runs last."""
    last = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"

    def zero(resid, hook):
        return torch.zeros_like(resid)

    def noise(resid, hook):
        return torch.randn_like(resid)

    for zero_first in (True, False):
        model.reset_hooks()
        for hook in ((zero, noise) if zero_first else (noise, zero)):
            model.add_hook(last, hook, prepend=True)
        logits = model(prompt_of(model))
        assert torch.allclose(logits, model.unembed.b_U.expand_as(logits)) == zero_first


def test_hook_points_add_and_report_hooks_by_direction_permanence_and_level(model):
    """Ported from test_hook_points.py::test_add_hook_forward, ::test_add_hook_backward,
    ::test_add_hook_permanent, ::test_add_hook_with_level and the TestHookPointHasHooks cases, on
    a hook point of the specimen (our shape-checked HookPoint)."""
    point = model.hook_dict["blocks.0.hook_resid_post"]

    def hook(activation, hook):
        return activation

    assert not point.has_hooks() and not point.has_hooks(dir="bwd")
    point.add_hook(hook, dir="fwd", level=0, is_permanent=True)
    point.add_hook(hook, dir="fwd", level=1)
    point.add_hook(hook, dir="bwd", level=2)
    assert len(point.fwd_hooks) == 2 and len(point.bwd_hooks) == 1
    assert point.fwd_hooks[0].is_permanent and point.fwd_hooks[1].context_level == 1
    assert point.has_hooks(dir="fwd", level=0) and not point.has_hooks(dir="fwd", level=0, including_permanent=False)
    assert point.has_hooks(dir="bwd", level=2) and not point.has_hooks(dir="bwd", level=1)
    assert not point.has_hooks(level=3)
    point.remove_hooks(dir="both")
    assert point.has_hooks(dir="fwd") and not point.has_hooks(including_permanent=False), "the permanent one stays"
    point.remove_hooks(dir="both", including_permanent=True)
    assert not point.has_hooks()


def test_a_backward_hook_sees_the_gradient_and_none_leaves_the_activation(model):
    """A backward hook runs with the gradient of its activation (test_hooks.py's backward use), and a
    forward hook returning None leaves the activation as it was
    (test_hook_points.py::test_reshape_functionality_hook_returns_none_integration, without the
    conversion)."""
    grads = []
    text = prompt_of(model)
    unchanged = model.run_with_hooks(text, return_type="loss",
                                     fwd_hooks=[("blocks.0.hook_resid_post", lambda resid, hook: None)])
    torch.testing.assert_close(unchanged, model(text, return_type="loss"))
    # TransformerLens's way to a backward hook: keep the hooks past the forward, then reset them
    loss = model.run_with_hooks(text, return_type="loss", reset_hooks_end=False,
                                bwd_hooks=[("blocks.0.hook_resid_post", lambda grad, hook: grads.append(grad))])
    loss.backward()
    model.reset_hooks()
    assert len(grads) == 1 and grads[0].shape == (1, len(model.to_tokens(text)[0]), model.cfg.d_model)
    assert grads[0].abs().sum() > 0 and not model.has_active_hooks()
    model.zero_grad()


def test_transformer_lens_layout_and_text_inputs(model):
    """What a TransformerLens notebook reads first, on every specimen."""
    cfg = model.cfg
    assert model.embed.W_E is model.W_E and model.embed.W_E.shape == (cfg.d_vocab, cfg.d_model)
    assert model.unembed.W_U is model.W_U and model.unembed.b_U.shape == (cfg.d_vocab,)
    attn = model.blocks[0].attn
    assert attn.W_Q.shape == attn.W_K.shape == attn.W_V.shape == (cfg.n_heads, cfg.d_model, cfg.d_head)
    assert attn.W_O.shape == (cfg.n_heads, cfg.d_head, cfg.d_model)
    assert attn.b_Q.shape == attn.b_K.shape == attn.b_V.shape == (cfg.n_heads, cfg.d_head)
    assert hasattr(model, "pos_embed") == (cfg.pos_embed != "none")
    text = prompt_of(model)
    tokens = model.to_tokens(text)
    torch.testing.assert_close(model(text), model(tokens))
    logits, cache = model.run_with_cache(text)
    torch.testing.assert_close(logits, model(tokens))
    assert model.to_string(tokens[0]) == text and model.to_str_tokens(text) == list(text)
    embedded = model.embed(tokens)
    torch.testing.assert_close(embedded, cache["hook_embed"] + (cache["hook_pos_embed"] if "hook_pos_embed" in
                                                                  cache.cache_dict else 0))
    rotary = [name for name in model.hook_dict if name.endswith(("hook_rot_q", "hook_rot_k"))]
    if rotary:
        q, rot_q = cache["rot_q", 0], cache["q", 0]
        assert q.shape == rot_q.shape and torch.equal(q[:, 0], rot_q[:, 0]), "position 0 is not rotated"


def test_every_hook_that_never_fires_is_refused_in_one_line(model):
    """A hook on a point the model never fires cannot be added: add_hook and run_with_hooks raise a
    one-line ValueError naming it and what to do."""
    silent = [name for name in model.hook_dict if name not in model.fired_hooks()]
    assert all(name.endswith("attn.hook_result") for name in silent) or silent, silent
    for name in silent:
        for add in (lambda: model.add_hook(name, lambda x, hook: x),
                    lambda: model.run_with_hooks(prompt_of(model), fwd_hooks=[(name, lambda x, hook: x)])):
            with pytest.raises(ValueError, match=f"a hook on {name} would never run") as error:
                add()
            assert "\n" not in str(error.value)
    assert not model.has_active_hooks()


def test_a_hook_meaning_something_else_warns_once_naming_the_tl_hook():
    model = build_model(ModelConfig.from_preset("rope", "tiny", n_ctx=16))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            model.run_with_hooks("w1r1", fwd_hooks=[("blocks.0.attn.hook_attn_scores", lambda x, hook: None)])
        model.run_with_hooks("w1r1", fwd_hooks=[("blocks.0.attn.hook_pattern", lambda x, hook: None)])
    messages = [str(w.message) for w in caught if w.category is TLMeaningWarning]
    assert messages == ["blocks.0.attn.hook_attn_scores is not what TransformerLens's hook of that name holds on "
                        "this rope model (softmax attention, norm_placement='pre'): "
                        "blocks.0.attn.hook_attn_scores_tl is (docs/reference/hooks.md)"]
    diff = build_model(ModelConfig.from_preset("diff", "tiny", n_ctx=16))
    assert diff.tl_meaning_elsewhere()["blocks.0.attn.hook_pattern"] == "blocks.0.attn.hook_pattern_tl"


def test_a_rescaled_decomposition_warns_once_per_method_on_a_stream_norm_model():
    """On a model that normalises its stream, the cache's decompositions return components
    rescaled through the later norms (so they add up), not TransformerLens's raw outputs: the
    first call of each method says so, naming TransformerLens's own; a pre-norm model is silent."""
    stream = build_model(ModelConfig.from_preset("rope", "tiny", n_ctx=16, norm_placement="stream"))
    _, cache = stream.run_with_cache("w1r1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            cache.decompose_resid()
            cache.stack_head_results()
    messages = [str(w.message) for w in caught if w.category is TLMeaningWarning]
    assert [m.split(" on this")[0] for m in messages] == ["decompose_resid", "stack_head_results"]
    assert "ActivationCache.decompose_resid(cache, ...)" in messages[0] and "\n" not in messages[0]
    pre = build_model(ModelConfig.from_preset("rope", "tiny", n_ctx=16))
    _, cache = pre.run_with_cache("w1r1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.decompose_resid()
    assert not [w for w in caught if w.category is TLMeaningWarning]


def test_the_task_vocabulary_reads_text():
    model = build_model(ModelConfig.from_preset("rope", "tiny", n_ctx=16))
    model.vocab = ("pass", "x=0", "x++", "0", "1")
    assert model.to_tokens("x=0 x++ pass").tolist() == [[1, 2, 0]]
    assert model.to_string(model.to_tokens("x=0 x++")[0]) == "x=0 x++"
    with pytest.raises(ValueError, match=r"'y' at position 4 of 'x=0 y' is not a token"):
        model.to_tokens("x=0 y")
    model.trained_task = "automaton"
    del model.__dict__["_vocab"]
    assert model.vocab == ("0", "1", "_")
