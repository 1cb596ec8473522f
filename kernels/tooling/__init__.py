"""What the four ops share and the tooling around them, apart from the ops themselves.

- ``common``: the pieces every implementation uses (the mask fill, the causal mask, the suffix
  sum, TDA's threshold); imports no triton, and ``models`` imports it.
- ``rows``: the blocks of query rows with a hand-written backward that each op's CPU path
  (``kernels/<op>/rows.py``) is built from.
- ``tiles``: the Triton helpers of the ops' kernels (loads, stores, causal tiles, the online
  softmax) and the choice of tiles per GPU.
- ``native`` (with ``native.c``): fused C kernels of the CPU forward without gradients.
- ``bench``: the kernels timed against PyTorch and SDPA; ``aot``: compiled for A100, H100 and
  MI300 without a GPU, their resources read; ``cost``: their predicted cost on a GPU;
  ``gpu_check``: the check on one GPU (``make gpu-kernels``).
"""
