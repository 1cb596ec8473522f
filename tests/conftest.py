"""Session-wide test set-up."""

import os

import torch

# The Triton kernels run on CPU tensors only under Triton's interpreter, which must be on
# before triton is first imported, by whichever test module comes first.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
