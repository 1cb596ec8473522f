"""What several test files share: the models to parametrise over, and how gradients are compared."""

from __future__ import annotations

import torch

from models.attention import get_attention_class
from models.config import MODEL_FAMILIES


def models_with(path: str) -> list[str]:
    """One model name per registered mechanism that has ``path`` (``"triton"`` or ``"rows"``)
    among its ``IMPLEMENTATIONS``: a new mechanism with a fast path is tested without editing the tests."""
    by_mechanism = {}
    for model, (mechanism, _, _) in MODEL_FAMILIES.items():
        if mechanism and path in get_attention_class(mechanism).IMPLEMENTATIONS:
            by_mechanism.setdefault(mechanism, model)
    return list(by_mechanism.values())


def rms(t: torch.Tensor) -> torch.Tensor:
    return t.double().pow(2).mean().sqrt()


# Float32 rounding leaves errors of about 1e-7 to 1e-6 of the gradients' overall size, whatever the
# size of one gradient: a gradient that is exactly zero in the reference (CoPE's position table at
# T = 1) may come out as 1e-6 elsewhere. The floor of each relative error is this fraction of the
# RMS of all the reference's gradients together.
SCALE_FLOOR = 1e-2


def relative_errors(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per key, ``RMS(actual - expected) / (RMS(expected) + SCALE_FLOOR * RMS(all of expected))``:
    relative where the expected value is large, scaled by the others where it is zero. Where
    every expected value is zero (a row with no key at T = 1), only an exact zero passes."""
    scale = rms(torch.cat([t.detach().flatten().double() for t in expected.values()]))
    return {key: (rms(actual[key].detach() - t.detach())
                  / (rms(t.detach()) + SCALE_FLOOR * scale).clamp_min(torch.finfo(torch.float64).tiny)).item()
            for key, t in expected.items()}
