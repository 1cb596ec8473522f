"""The recurrent skyline of the flip-flop paper: a 1-layer LSTM (hidden 128, App. B.2),
behind the same interface as the transformer (tokens -> logits, hooks, ``cfg``)."""

from __future__ import annotations

import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from models.config import ModelConfig
from models.lens import HookedModelMixin, check_return_type
from models.tokens import as_token_ids


class LSTMModel(HookedModelMixin, HookedRootModule):
    """Embedding (``d_model`` = hidden size) -> LSTM -> unembedding.

    Hooks, both ``[batch, pos, d_model]``: ``hook_embed``, the token embeddings ``W_E[tokens]``
    (the LSTM's inputs), and ``hook_hidden``, the LSTM's outputs h_t.
    There are no blocks, heads or residual stream, so of TransformerLens's cache helpers only
    those that take a stack (``logit_attrs``, ``apply_ln_to_stack``) apply; the others name
    the missing hook and why.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.W_E = nn.Parameter(torch.randn(cfg.d_vocab, cfg.d_model) * 0.02)
        self.hook_embed = HookPoint()
        self.lstm = nn.LSTM(cfg.d_model, cfg.d_model, num_layers=cfg.n_layers, batch_first=True)
        self.hook_hidden = HookPoint()
        self.W_U = nn.Parameter(torch.randn(cfg.d_model, cfg.d_vocab) / cfg.d_model**0.5)
        self.setup()

    def forward(self, tokens: torch.Tensor, return_type: str | None = "logits", loss_per_token: bool = False, *,
                reads_only: bool = False):
        """The transformer's return types (``GlitchLensTransformer.forward``); ``"normalized"`` is
        the LSTM output, which the unembedding reads."""
        check_return_type(return_type)
        embedded = self.hook_embed(self.W_E[as_token_ids(tokens, self.cfg.d_vocab)])
        # nn.LSTM refuses T = 0; an empty input has an empty output, as for the transformer
        hidden = self.hook_hidden(self.lstm(embedded)[0] if embedded.shape[1] else embedded)
        return self.output_as(return_type, hidden, tokens, loss_per_token, reads_only)

    def unembed(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.W_U

    @property
    def folded_W_U(self) -> torch.Tensor:
        """``W_U`` itself: no norm stands between the hidden state and the unembedding."""
        return self.W_U
