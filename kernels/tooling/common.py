"""What the implementations of every op share, in plain PyTorch: the fill for masked logits,
the causal mask, the float32 floor, the scores, the suffix sum, TDA's threshold tau, and how a
reference passes its tensors through a mechanism's hooks.

Nothing here imports triton, so that ``models`` can import it at any time: triton is imported
only with a kernel (``kernels.<op>.triton``), after ``TRITON_INTERPRET`` is read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping

import torch

# Fill for masked logits: finite (so that 0 * fill is never NaN) and far below any real
# logit. Logits are always kept in float32, where -1e11 is representable; in fp16 it
# would overflow to -inf.
# The environment variables this module reads, {name: (default, meaning)} (docs/reference/environment.md).
ENVIRONMENT_VARIABLES = {"TRITON_INTERPRET": (
    "", "1: Triton's interpreter runs the Triton kernels, on CPU tensors (read by Triton when it is first "
        "imported; the tests set it where there is no GPU)")}
MASK_FILL = -1e11

# Elements of one [batch, head, query_pos, key_pos] map a reference may build (4 GiB in float32;
# a reference holds several such maps at once): past it, a clear error rather than the
# allocator's failure minutes into a run.
MAX_MAP_ELEMENTS = 1 << 30

# A reference's hooks: the mechanism's HookPoints by name (``"hook_pattern"``, ...).
Hooks = Mapping[str, Callable[[torch.Tensor], torch.Tensor]]
NO_HOOKS: Hooks = {}


def through(hooks: Hooks, name: str, x: torch.Tensor) -> torch.Tensor:
    """``x`` through the hook called ``name``, or ``x`` itself where ``hooks`` has none: a
    reference run on its own (a test, a benchmark) has no hooks."""
    return hooks[name](x) if name in hooks else x


def no_dropout(logits: torch.Tensor) -> torch.Tensor:
    """A reference's ``drop_logits`` outside a model (``Attention.drop_logits`` inside one)."""
    return logits


def interpreting() -> bool:
    """Whether Triton's interpreter runs the kernels (on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def upcast(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32, or float64 if it already is: logits and softmax never run in half
    precision, and float64 gradchecks keep their precision."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def causal_mask(n_query: int, n_key: int, device=None) -> torch.Tensor:
    """``[query_pos, key_pos]`` bool, True where key j <= query i (queries are the last
    ``n_query`` positions of the key sequence)."""
    offset = n_key - n_query
    q = torch.arange(n_query, device=device)[:, None] + offset
    k = torch.arange(n_key, device=device)[None, :]
    return k <= q


def check_map_size(q: torch.Tensor, k: torch.Tensor) -> None:
    """Refuse attention of ``[batch, pos, head, d_head]`` q and k whose ``[batch, head,
    query_pos, key_pos]`` maps would exceed :data:`MAX_MAP_ELEMENTS`, naming the size and the
    way out: the references build whole maps, and the CPU path keeps its blocks of them for a
    backward."""
    (B, Tq, H, _), Tk = q.shape, k.shape[1]
    if B * H * Tq * Tk > MAX_MAP_ELEMENTS:
        raise ValueError(
            f"this attention would hold [batch, head, query_pos, key_pos] maps of {B} x {H} x {Tq} x {Tk} = "
            f"{B * H * Tq * Tk:,} elements ({B * H * Tq * Tk * 4 / 2**30:.1f} GiB each in float32), over the limit of "
            f"{MAX_MAP_ELEMENTS:,}: run fewer or shorter sequences at a time; to evaluate, run under torch.no_grad() "
            "without hooks inside the attention, where the CPU path and the Triton kernels stream the keys")


def scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``S = q k^T / sqrt(d_head)`` ``[batch, head, query_pos, key_pos]`` from ``[batch, pos,
    head, d_head]`` q and k, in float32 throughout (the scale is applied to q, the smaller
    tensor): TRA and FoT."""
    check_map_size(q, k)
    return torch.einsum("bqhd,bkhd->bhqk", upcast(q) / math.sqrt(q.shape[-1]), upcast(k))


def scaled_products(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """:func:`scaled_scores` with the products in q's dtype (half precision under autocast),
    then float32 and the scale: CoPE, softmax attention and Diff."""
    check_map_size(q, k)
    return upcast(torch.einsum("bqhd,bkhd->bhqk", q, k)) / math.sqrt(q.shape[-1])


def apply_pattern(pattern: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``pattern [batch, head, q, k]`` applied to ``v [batch, pos, head, d]`` -> ``z``."""
    return torch.einsum("bhqk,bkhd->bqhd", pattern.to(v.dtype), v)


def suffix_sum(x: torch.Tensor) -> torch.Tensor:
    """``sum_{t >= j} x_t`` along the last axis: TRA's D-bar (eq. 6) and CoPE's positions (eq. 4)."""
    return x.flip(-1).cumsum(-1).flip(-1)


def suffix_sum_from_prefix(x: torch.Tensor) -> torch.Tensor:
    """:func:`suffix_sum` as the row total less the prefix sum before each entry, without the
    two flipped copies: what the CPU path's blocks use. Equal for counts (TRA's D-bar); for
    CoPE's gates it differs from :func:`suffix_sum` by float rounding, which the checkpoints
    trained on the CPU path were trained with."""
    prefix = x.cumsum(-1)
    total = prefix[..., -1:].clone()
    return prefix.neg_().add_(total).add_(x)


def threshold(n_pos: int, d_head: int, beta: torch.Tensor, kappa) -> torch.Tensor:
    """TDA's tau ``[1 or head, pos]`` (TDA paper eq. 1, i the 0-based query position)

        tau_i = beta sqrt(2 max(log((i + 1) / kappa), 0) / d_head)

    in beta's dtype, differentiable in beta (a scalar, or one per head) and in a kappa tensor
    (where the clamped log is 0 sqrt's derivative is infinite). The log is clamped at 0 so
    that tau is never NaN for kappa > 1."""
    beta = beta.reshape(-1, 1)
    i = torch.arange(n_pos, device=beta.device, dtype=beta.dtype)
    log_term = torch.log((i + 1) / kappa).clamp(min=0)
    return beta * torch.sqrt(2 * log_term / d_head)
