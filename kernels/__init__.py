"""The attention ops with a fast path, one folder each, after flash-linear-attention's
``fla/ops/<op>/``: ``tra``, ``forgetting`` (FoT), ``cope``, ``threshold`` (trela and TDA).

- ``kernels/<op>/reference.py``: the op's math in plain PyTorch, one function that takes a
  mechanism's hooks: the spec, and what ``models.attention`` runs when a hook needs the full
  ``[query, key]`` matrices.
- ``kernels/<op>/rows.py``: its CPU path, blocks of query rows with a hand-written backward
  (the blocks themselves in ``kernels/tooling/rows.py``).
- ``kernels/<op>/triton.py``: its streaming (FlashAttention-style) Triton kernel, never
  materialising the T x T matrix (CoPE has none); the tile helpers in ``kernels/tooling/tiles.py``.
- ``kernels/tooling/native.c`` (built and called by ``kernels/tooling/native.py``): fused C kernels of the CPU
  forward without gradients (the evaluation's) for softmax attention, Diff, CoPE, trela and TDA,
  which the ``rows`` paths call when they can run.

Every implementation of an op takes the same arguments as its reference (``tests/test_op_<op>.py``
compares them, forward and backward). ``kernels/tooling/common.py`` holds what they share (the mask
fill, the causal mask, the suffix sum, TDA's threshold), imports no triton, and ``models``
imports it; ``kernels.tooling.bench`` times the kernels against PyTorch and SDPA, ``kernels.tooling.aot`` compiles
them for A100, H100 and MI300 without a GPU and reads their resources, ``kernels.tooling.cost`` predicts
their cost on a GPU. ``kernels`` imports neither ``models`` nor ``interp``.
"""
