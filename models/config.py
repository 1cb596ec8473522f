"""Model configuration: one dataclass and the size presets.

A *model name* (``rope``, ``tra``, ``lstm``, ...) fixes the architecture family: which
attention mechanism from the registry, which residual-stream position embedding, and
the mechanism's default options (the names: :data:`models.mechanisms.MODEL_FAMILIES`, the
built-in ones and those registered there). A *preset* (``tiny``, ``mech``, ``mini``) fixes sizes.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from models.mechanisms import MODEL_FAMILIES, find_mechanism, unknown_model

ATTENTION_IMPLS = ("auto", "reference", "rows", "triton")
NORM_PLACEMENTS = ("pre", "stream")
INIT_SCHEMES = ("scaled", "torch")

PRESETS: dict[str, dict[str, int]] = {
    "mini": {"n_layers": 4, "n_heads": 4, "d_model": 256},  # the TRA paper's set-up
    "mech": {"n_layers": 2, "n_heads": 1, "d_model": 128},  # the App. A pair's layout (2 x 1), d_model 128
    "tiny": {"n_layers": 2, "n_heads": 1, "d_model": 64},   # tests, quick CPU runs, every -mech specimen
}


# Upper bounds of the sizes, far above every model here (mini: 4 layers x 4 heads, d_model 256), so
# that a mistyped size is refused with its limit before anything is allocated.
MAX_SIZES = {"n_layers": 256, "n_heads": 256, "d_model": 16384, "d_mlp": 65536, "d_vocab": 65536,
             "n_ctx": 1 << 20, "label_range": 1 << 20, "lstm_hidden": 8192}
MAX_PARAMETERS = 1 << 30  # 4 GiB of float32 weights, 16 GiB with AdamW's state and the gradients


def check_known_fields(cls: type, data: dict[str, Any], what: str) -> None:
    """Refuse a saved config with fields the dataclass ``cls`` does not have; fields it lacks
    are fine (they were added since, and take their defaults)."""
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"{what} has unknown fields {unknown}; it was written by another tool or version")


@dataclass
class ModelConfig:
    """Everything needed to rebuild a model. Field names that TransformerLens helpers read
    (``n_layers``, ``n_heads``, ``d_model``, ``d_head``, ``d_mlp``, ``d_vocab``, ``n_ctx``) keep
    their TransformerLens meaning. ``n_ctx`` is the training length: it sizes the learned
    position tables; longer inputs are still accepted (extrapolation is what we study).

    The other config attributes TransformerLens's ``ActivationCache`` helpers and
    ``transformer_lens.patching`` read are not fields, so no saved config changes: the
    properties ``attn_only``, ``normalization_type`` and ``n_key_value_heads`` follow from
    the fields, and ``device`` is kept current by the model built from the config. So do the
    attributes TransformerLens code reads about a model (``act_fn``, ``gated_mlp``,
    ``positional_embedding_type``, ``default_prepend_bos``, ``model_name``, ``dtype``,
    ``use_attn_result``), each with TransformerLens's meaning.
    """

    model: str = "rope"
    n_layers: int = 2
    n_heads: int = 1
    d_model: int = 64
    d_mlp: int | None = None
    d_vocab: int = 5
    n_ctx: int = 512
    dropout: float = 0.0
    label_range: int = 2048
    lstm_hidden: int = 128
    attention: str | None = None
    pos_embed: str = "none"
    attention_options: dict[str, Any] = field(default_factory=dict)
    attention_impl: str = "auto"  # "auto" | "reference" | "rows" | "triton" (see Attention.implementation)
    # The block recipe (see models.backbone.Block and init_weights). Defaults: the Llama-style
    # pre-norm block with scaled normal init and no biases.
    norm_placement: str = "pre"   # "pre": x + f(norm(x)); "stream": x = norm(x), then x + f(x)
    init: str = "scaled"          # "scaled" | "torch" (nn.Linear defaults, as the TRA authors' code)
    linear_bias: bool = False     # biases on the MLP and the attention output projection
    # Dropout where the TRA authors' notebook applies it (each acts in training mode only; see
    # models.backbone and Attention.drop_logits). ``dropout`` above acts on the embedding and on
    # both sublayer outputs; the notebook drops neither sublayer output.
    embedding_dropout: float | None = None  # on the embedding output; None: ``dropout``
    attention_dropout: float = 0.0  # on the attention logits, before the masked keys are filled
    mlp_hidden_dropout: float = 0.0  # on the MLP's hidden activation, before W_out

    def __post_init__(self):
        if self.model not in MODEL_FAMILIES:
            # a mechanism of one's own, registered or to be found (torch then)
            if not isinstance(self.model, str) or not find_mechanism(self.model):
                raise ValueError(unknown_model(self.model))
        for name in ("n_layers", "n_heads", "d_model", "d_vocab", "n_ctx", "label_range", "lstm_hidden"):
            check_int(name, getattr(self, name), maximum=MAX_SIZES[name])
        if self.d_mlp is not None:
            check_int("d_mlp", self.d_mlp, maximum=MAX_SIZES["d_mlp"])
        for name in ("dropout", "attention_dropout", "mlp_hidden_dropout", "embedding_dropout"):
            value = getattr(self, name)
            if name == "embedding_dropout" and value is None:
                continue
            if not is_finite_number(value) or not 0.0 <= value < 1.0:
                none = " (or null: the value of dropout)" if name == "embedding_dropout" else ""
                raise ValueError(f"{name} must be a number in [0, 1){none}, got {value!r}")
        if not isinstance(self.attention_options, dict):
            raise ValueError(f"attention_options must be a dict, got {self.attention_options!r}")
        attention, pos_embed, defaults = MODEL_FAMILIES[self.model]
        self.attention = attention
        self.pos_embed = pos_embed
        self.attention_options = {**defaults, **self.attention_options}
        if attention is not None:
            _check_option_types(attention, self.attention_options)
        if self.model == "lstm":  # the skyline's size is fixed by lstm_hidden, not the preset
            self.n_layers, self.n_heads, self.d_model = 1, 1, self.lstm_hidden
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}, got {self.attention_impl!r}")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(f"norm_placement must be one of {NORM_PLACEMENTS}, got {self.norm_placement!r}")
        if self.init not in INIT_SCHEMES:
            raise ValueError(f"init must be one of {INIT_SCHEMES}, got {self.init!r}")
        if self.d_mlp is None:
            self.d_mlp = 2 * self.d_model
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.pos_embed == "label" and self.label_range < self.n_ctx:
            raise ValueError(f"label_range={self.label_range} must be >= n_ctx={self.n_ctx}")
        if self.approx_parameters() > MAX_PARAMETERS:
            raise ValueError(f"n_layers={self.n_layers}, d_model={self.d_model}, d_mlp={self.d_mlp} make about "
                             f"{self.approx_parameters():.3g} parameters, more than the {MAX_PARAMETERS:,} "
                             "(models.config.MAX_PARAMETERS) this toolkit builds")

    def approx_parameters(self) -> int:
        """An upper estimate of the parameter count, from the sizes alone (nothing is built):
        four attention and three MLP matrices per block, the embeddings and position tables."""
        if self.model == "lstm":
            return 4 * self.lstm_hidden * (2 * self.lstm_hidden + self.d_vocab + 2) + self.lstm_hidden * self.d_vocab
        return self.n_params + self.d_model * (2 * self.d_vocab + self.n_ctx + self.label_range)

    @property
    def n_params(self) -> int:
        """TransformerLens's ``cfg.n_params``: the weights of the hidden layers, computed from the
        sizes as TransformerLens does (four attention and three SwiGLU matrices per block), without
        embeddings, norms or a mechanism's small extras (gates, beta, lambda); the LSTM's weights.
        ``sum(p.numel() for p in model.parameters())`` counts everything."""
        if self.model == "lstm":
            return self.approx_parameters()
        return self.n_layers * (4 * self.d_model * self.d_model + 3 * self.d_model * self.d_mlp)

    @property
    def d_vocab_out(self) -> int:
        """TransformerLens's output vocabulary: the input one (the unembedding predicts tokens)."""
        return self.d_vocab

    # TransformerLens's cfg.device: where the model built from this config is. The model keeps
    # it current when it moves (models.lens.HookedModelMixin), as TransformerLens's models do.
    # Not annotated, so not a field: never saved, never compared.
    device = None
    # TransformerLens's cfg.dtype (the parameters' dtype, kept current as ``device`` is) and
    # cfg.use_attn_result (whether each head's output is computed at ``attn.hook_result``; the
    # model's ``set_use_attn_result`` sets it). Not fields either.
    dtype = None
    use_attn_result = False
    _model_name = None

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def attn_only(self) -> bool:
        """Every transformer block has an MLP."""
        return False

    @property
    def normalization_type(self) -> str | None:
        """``"RMS"``: the transformer's norms are RMSNorms with a learned gain. The LSTM has no
        norm (None), so TransformerLens's ``apply_ln_to_stack`` leaves its stacks unchanged."""
        return None if self.model == "lstm" else "RMS"

    @property
    def n_key_value_heads(self) -> int | None:
        """None: every head has its own keys and values (no grouped-query attention)."""
        return None

    @property
    def act_fn(self) -> str | None:
        """``"silu"``: the MLP is SwiGLU, ``silu(x W_gate) * (x W_in)`` (``gated_mlp``); None for
        the LSTM, which has no MLP."""
        return None if self.model == "lstm" else "silu"

    @property
    def gated_mlp(self) -> bool:
        return self.model != "lstm"

    @property
    def positional_embedding_type(self) -> str:
        """TransformerLens's name of the position encoding: ``"standard"`` (APE's learned table),
        ``"rotary"`` (RoPE, and by default Diff, trela and TDA), ``"alibi"``, ``"relative_positional_bias"``
        (REL, T5-style); ``"label"`` for Label, which TransformerLens does not have; ``"none"`` where
        only the mechanism itself sees positions (NoPE, TRA's and FoT's decay, CoPE's gates)."""
        from models.attention import get_attention_class

        if self.pos_embed != "none":
            return {"learned": "standard"}.get(self.pos_embed, self.pos_embed)
        if self.attention is None:
            return "none"
        options = get_attention_class(self.attention).Options(**self.attention_options)  # with its defaults
        if getattr(options, "rope", False):
            return "rotary"
        return {"alibi": "alibi", "rel": "relative_positional_bias"}.get(getattr(options, "bias", None), "none")

    @property
    def default_prepend_bos(self) -> bool:
        """False: the vocabulary has no BOS token."""
        return False

    @property
    def model_name(self) -> str:
        """What the model was loaded as: the specimen's name for ``load_pretrained`` (``"tra-mech"``),
        else the model name (``"tra"``). Assignable; not saved."""
        return self._model_name or self.model

    @model_name.setter
    def model_name(self, name: str) -> None:
        self._model_name = name

    @classmethod
    def from_preset(cls, model: str, preset: str = "tiny", **overrides) -> "ModelConfig":
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
        return cls(model=model, **{**PRESETS[preset], **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        check_known_fields(cls, data, "config")
        data = {k: v for k, v in data.items() if k not in ("attention", "pos_embed")}
        return cls(**data)


def check_int(name: str, value: Any, minimum: int = 1, maximum: int | None = None) -> None:
    """Refuse a value that is not an integer in ``[minimum, maximum]``, naming the option and
    the limits. The one check of every count in the configs and the evaluation."""
    if not _is_a(value, int) or value < minimum or (maximum is not None and value > maximum):
        wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        limit = f" at most {maximum:,}" if maximum is not None else ""
        raise ValueError(f"{name} must be {wanted}{limit}, got {value!r}")


def is_finite_number(value: Any) -> bool:
    return _is_a(value, float) and math.isfinite(value)


def _is_a(value: Any, kind: type) -> bool:
    """``isinstance`` as a config means it: bool is not a number (JSON's ``true`` is no
    layer count), and an int is a valid float."""
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, int) if kind is int else isinstance(value, (int, float) if kind is float else kind)


def _check_option_types(attention: str, options: dict[str, Any]) -> None:
    """Each option must have its field's type in the mechanism's ``Options`` dataclass, so
    ``qk_norm="banana"`` is an error, not a truthy string, and a number must be finite. Unknown names are left to the
    mechanism, whose error lists the names it accepts."""
    from models.attention import get_attention_class

    hints = typing.get_type_hints(get_attention_class(attention).Options)
    for name, value in options.items():
        if isinstance(value, float) and not math.isfinite(value):   # JSON has no NaN: a config could not be saved
            raise ValueError(f"attention option {name}={value!r} of {attention!r} must be a finite number")
        if name not in hints:
            continue
        hint = hints[name]
        kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        if not any(value is None if kind is type(None) else _is_a(value, kind) for kind in kinds):
            wanted = " or ".join("null" if kind is type(None) else kind.__name__ for kind in kinds)
            raise ValueError(f"attention option {name}={value!r} of {attention!r} must be {wanted}")
