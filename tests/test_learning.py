"""Short CPU training runs that must learn flip-flop (slow; `.ci/run` runs them).

Each run trains a ``tiny`` model on fresh FFL(0.8) at T = 512 with the clean loss and checks
the loss against chance (ln 2 per read bit) and the read accuracy on the ``iid`` split.
"""

import json
import math

import pytest
import torch

from interp.evaluate import evaluate_splits
from interp.train import TrainConfig, train
from models import ModelConfig

pytestmark = pytest.mark.slow

# model -> (steps, lr, attention options): the recipes measured to learn on this CPU.
RECIPES = {
    "fot": (80, 1e-3, {}),
}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_tiny_model_learns_iid(name, tmp_path):
    steps, lr, options = RECIPES[name]
    torch.set_num_threads(min(2, torch.get_num_threads()))
    model = train(ModelConfig.from_preset(name, "tiny", attention_options=options),
                  TrainConfig(steps=steps, lr=lr, batch_size=16, eval_n=50), tmp_path / name, progress=False)
    log = (tmp_path / name / "log.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in log if '"loss"' in line]
    assert sum(losses[-10:]) / 10 < 0.1 * math.log(2), "the clean loss must end far below chance"
    iid = evaluate_splits(model, ["iid"])["iid"]
    assert 1 - iid.error_rate >= 0.95, f"{name}: iid read accuracy {1 - iid.error_rate:.4f}"
