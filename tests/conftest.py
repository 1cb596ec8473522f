"""Session-wide test set-up, and the fixtures several test files share."""

import importlib.util
import os

import jaxtyping
import pytest
import torch

# The modules whose signatures carry jaxtyping shapes: imported from here on with every function
# checked by beartype at each call (a call costs about 5 us more, 20 us with tensors to check), so
# that the whole suite holds the shapes they promise; ``float`` admits an ``int``, as PEP 484 says.
# This must come before any of them is imported. Not the fast paths (``kernels.<op>.{rows,triton}``):
# their signatures state no shapes, and Triton compiles the source of a ``@triton.jit`` function,
# which the wrapper would replace.
SHAPE_CHECKED = ("interp.metrics", "models.attention", "models.lens", "kernels.cope.reference",
                 "kernels.forgetting.reference", "kernels.threshold.reference", "kernels.tra.reference")
jaxtyping.install_import_hook(SHAPE_CHECKED, "beartype.beartype(conf=beartype.BeartypeConf(is_pep484_tower=True))")

# The environment variables this module reads, {name: (default, meaning)} (docs/reference/environment.md).
ENVIRONMENT_VARIABLES = {
    "TRITON_INTERPRET": ("1 where there is no GPU", "the tests run the Triton kernels under Triton's interpreter "
                                                    "unless a GPU is there or this is already set"),
    "PYTEST_XDIST_WORKER": ("", "set by pytest-xdist in its workers: one torch thread each, and OMP_NUM_THREADS=1 "
                                "for the processes the tests start"),
}

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


@pytest.fixture(scope="session")
def device() -> torch.device:
    """Where the Triton kernels and the models on them are tested: the GPU when there is one,
    else the CPU under Triton's interpreter (switched on above)."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no CUDA GPU, and TRITON_INTERPRET is not 1: the Triton kernels cannot run here")
    return torch.device("cpu")


def pytest_collection_modifyitems(items):
    """The slow tests first, then the integration ones (subprocesses, sweeps: 10-45 s each), each
    in their usual order, so that the longest runs start early and the workers finish together."""
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None,
                                 item.get_closest_marker("integration") is None))


@pytest.fixture
def tokens():
    """``tokens(batch, n_pos, seed=1)``: random token ids in 0..4 ``[batch, n_pos]``, the same
    for the same arguments."""
    def draw(batch: int, n_pos: int, seed: int = 1) -> torch.Tensor:
        return torch.randint(0, 5, (batch, n_pos), generator=torch.Generator().manual_seed(seed))

    return draw


@pytest.fixture
def model_pair():
    """``model_pair(name, impl, device="cpu", **overrides)``: one tiny model (2 heads, d_model
    32, n_ctx 40) built twice with the same weights, with ``attention_impl="reference"`` and
    with ``impl``."""
    from models import ModelConfig, build_model

    def build(name, impl, device="cpu", **overrides):
        cfg = ModelConfig.from_preset(name, "tiny", **{"n_ctx": 40, "n_heads": 2, "d_model": 32, **overrides})
        torch.manual_seed(0)
        reference = build_model(ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": "reference"})).to(device)
        other = build_model(ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": impl})).to(device)
        other.load_state_dict(reference.state_dict())
        return reference, other

    return build


@pytest.fixture
def single_head():
    """``single_head(model, d_head=4)``: a one-head attention layer of ``model`` (d_model = d_head)."""
    from models import ModelConfig
    from models.attention import get_attention_class

    def build(model: str, d_head: int = 4):
        cfg = ModelConfig(model=model, n_layers=1, n_heads=1, d_model=d_head)
        return get_attention_class(cfg.attention)(cfg, layer=0)

    return build


@pytest.fixture(params=[5, 16])
def small_blocks(request, monkeypatch):
    """``kernels.tooling.rows``' blocks much smaller than the sequences, so that a test crosses block
    boundaries."""
    import kernels.tooling.rows

    monkeypatch.setattr(kernels.tooling.rows, "ROWS", request.param)


@pytest.fixture(scope="module")
def exact_bf16_dot():
    """Triton's interpreter keeps bf16 as raw uint16 bits and its ``tl.dot`` multiplies the
    bits (triton-lang/triton#11584; compiled kernels are unaffected). Widen bf16 operands
    to float32 first, exactly (a bf16 is the top half of a float32), as the proposed fix
    (#11585) does, so that the bf16 tests check the kernels rather than that bug."""
    from kernels.tooling.common import interpreting

    if not interpreting() or importlib.util.find_spec("triton") is None:
        yield  # compiled kernels, or none
        return
    import numpy as np
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.create_dot

    def widened(x):
        if x.dtype != interpreter.tl.bfloat16:
            return x
        return interpreter.TensorHandle((x.data.astype(np.uint32) << 16).view(np.float32), interpreter.tl.float32)

    builder.create_dot = lambda self, a, b, *rest: original(self, widened(a), widened(b), *rest)
    yield
    builder.create_dot = original


@pytest.fixture
def tiny_model():
    """``tiny_model(name, seed=0, **overrides)``: the ``tiny`` preset of model ``name`` with
    ``overrides``, its weights drawn after ``torch.manual_seed(seed)``, in eval mode."""
    from models import ModelConfig, build_model

    def build(name: str, seed: int = 0, **overrides):
        torch.manual_seed(seed)
        return build_model(ModelConfig.from_preset(name, "tiny", **overrides)).eval()

    return build
