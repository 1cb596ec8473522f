"""Fused Triton kernels (FlashAttention-style, never materialising the T x T matrix) for
the mechanisms with a streaming form: TRA, FoT, trela and TDA. Each is exact against the
mechanism's ``reference`` in ``models.attention`` (see ``tests/test_kernels.py``); ``kernels``
imports neither ``models`` nor ``interp``.

Inputs are ``[batch, pos, head, d_head]`` with any strides; CUDA tensors, or CPU tensors
under ``TRITON_INTERPRET=1``. ``kernels.bench`` times them against PyTorch and SDPA.
``kernels.rows`` is the CPU path (plain PyTorch, blocks of query rows, hand-written backward)
for the same mechanisms and CoPE.
"""

from kernels.forgetting import forgetting_attention
from kernels.threshold import differential_threshold_attention, threshold_attention
from kernels.tra import tra_attention

__all__ = ["differential_threshold_attention", "forgetting_attention", "threshold_attention", "tra_attention"]
