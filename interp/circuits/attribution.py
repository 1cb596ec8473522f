"""Direct logit attribution: what each component of the residual stream writes straight into
the logit difference at a read (conventions: :mod:`interp.circuits`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from interp.circuits.reads import read_answers
from interp.tasks import ONE, ZERO, read_mask
from models.tokens import as_token_ids


def _check_additive_stream(model) -> None:
    if not hasattr(model, "blocks"):
        raise ValueError(f"the {model.cfg.model} model has no residual stream to split into components")
    if model.cfg.norm_placement == "stream":
        raise ValueError("with norm_placement='stream' each block replaces the stream by its normalisation, so "
                         "the final stream is not the sum of the components' outputs: no direct attribution")


def direct_logit_attribution(model, tokens, cache=None) -> pd.DataFrame:
    """What each component writes directly into the logit difference at every read of ``tokens``.

    The final stream is the sum of the embeddings, every head's output ``z @ W_O`` (from
    ``hook_z``), the attention output biases and the MLP outputs; the logits are that stream
    divided by the final norm's scale (``ln_final.hook_scale``) times the unembedding with the
    norm's gain folded in (``model.folded_W_U``). So each component's share of the logit
    difference is its output at the read, divided by that scale, dotted with
    ``folded_W_U[:, right] - folded_W_U[:, other]``, and the shares of a read add up to the
    model's logit difference there (to float rounding). "Direct" means only the path straight
    to the unembedding: what a head does through later layers is not in its share.

    ``cache``: a ``run_with_cache`` cache of ``tokens`` holding ``hook_embed``
    (``hook_pos_embed``), every ``hook_z`` and ``hook_mlp_out`` and ``ln_final.hook_scale``;
    by default the model is run here.

    Returns one row per (read, component), components in the model's order: ``seq``,
    ``position`` (of the ``r``), ``write_pos``, ``answer`` (the right bit), ``logit_diff`` (the
    model's, the sum of the read's rows), ``component`` (``embed``, ``pos_embed``, ``L{l}H{h}``,
    ``L{l} attn bias``, ``L{l} MLP``), ``kind`` (``embed``, ``pos_embed``, ``head``,
    ``attn_bias``, ``mlp``), ``layer`` and ``head`` (-1 where they do not apply) and
    ``attribution``. Models whose stream is not such a sum (the LSTM, ``norm_placement=
    "stream"``) raise a ``ValueError``.
    """
    _check_additive_stream(model)
    tokens = as_token_ids(tokens, model.cfg.d_vocab).to(model.cfg.device)
    seq, position = (torch.from_numpy(i) for i in np.nonzero(read_mask(tokens.cpu().numpy())))
    write_pos, answer = read_answers(tokens, position, rows=seq)
    if cache is None:
        _, cache = model.run_with_cache(tokens, names_filter=_dla_hook)
    direction = (model.folded_W_U[:, ZERO + answer] - model.folded_W_U[:, ONE - answer]).T.double()  # [read, d_model]
    scale = cache["ln_final.hook_scale"][seq, position].double()                                     # [read, 1]

    def share(out: torch.Tensor) -> np.ndarray:
        """``out [read, d_model]`` -> its direct contribution to each read's logit difference."""
        return (out.double() / scale * direction).sum(-1).detach().cpu().numpy()

    parts = [("embed", "embed", -1, -1, share(cache["hook_embed"][seq, position]))]
    if "hook_pos_embed" in model.hook_dict:
        parts.append(("pos_embed", "pos_embed", -1, -1, share(cache["hook_pos_embed"][seq, position])))
    for layer, block in enumerate(model.blocks):
        heads = torch.einsum("rhd,hdm->rhm", cache["z", layer][seq, position], block.attn.W_O)
        parts += [(f"L{layer}H{h}", "head", layer, h, share(heads[:, h])) for h in range(heads.shape[1])]
        if block.attn.b_O is not None:
            parts.append((f"L{layer} attn bias", "attn_bias", layer, -1, share(block.attn.b_O.expand(len(seq), -1))))
        parts.append((f"L{layer} MLP", "mlp", layer, -1, share(cache["mlp_out", layer][seq, position])))
    total = sum(part[-1] for part in parts)
    reads = pd.DataFrame({"seq": seq.numpy(), "position": position.numpy(), "write_pos": write_pos.numpy(),
                          "answer": answer.numpy(), "logit_diff": total})
    return pd.concat([reads.assign(component=name, kind=kind, layer=layer, head=head, attribution=values)
                      for name, kind, layer, head, values in parts], ignore_index=True)


def _dla_hook(name: str) -> bool:
    return name in ("hook_embed", "hook_pos_embed", "ln_final.hook_scale") or name.endswith(
        ("attn.hook_z", "hook_mlp_out"))


def dla_summary(frame: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Mean, and mean absolute, attribution per component (and per value of the columns
    ``by``, e.g. ``correct`` after a merge with ``read_table``), components in the model's
    order; ``share`` is the mean attribution over the mean logit difference."""
    keys = [*by, "component", "kind", "layer", "head"]
    grouped = frame.groupby(keys, sort=False)
    table = grouped.agg(n_reads=("attribution", "size"), attribution=("attribution", "mean"),
                        abs_attribution=("attribution", lambda a: a.abs().mean()),
                        logit_diff=("logit_diff", "mean")).reset_index()
    table["share"] = table.attribution / table.logit_diff
    return table
