"""Session-wide test set-up."""

import os

import torch

# The Triton kernels run on CPU tensors only under Triton's interpreter, which must be on
# before triton is first imported, by whichever test module comes first.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# `make test` runs the suite in one worker process per core (pytest-xdist): one torch thread
# each, and one for the processes the tests start (CLI runs, notebook kernels), so that no
# OpenMP team waits on a core another worker holds.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"


def pytest_collection_modifyitems(items):
    """The slow tests first (in their usual order), so that the longest runs start early and
    the workers finish together."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
