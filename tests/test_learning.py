"""Short CPU training runs that must learn flip-flop (slow; `.ci/run` runs them).

Every mechanism trains with the one recipe of docs/results/learning.md "Learning on CPU", the
``learning`` scale of ``glitchlens reproduce`` (``tiny`` preset with 4 heads, the
``cpu-learning`` recipe, fresh FFL(0.8) at T = 128, clean loss, lr 1e-3, batch 16, 1000 steps),
one torch thread, on the first seed that learned in the committed sweep (runs/learning: TRA did
not on seed 0, the others did; that section gives every seed). The check is on held-out FFL(0.8)
sequences of the training length: learning the task, apart from extrapolating it (the canonical
splits are T = 512; that section reports both).

The run is checked every ``CHECK_EVERY`` steps of its 1000-step schedule and passes at the
first check where it has learned: what is tested is that the recipe learns within its 1000
steps, and most runs have by step 300-500, which keeps the suite's largest cost in bounds.
Stopping and resuming changes nothing in the run (``train(until=...)``, then ``resume``).
"""

import dataclasses
import json
import math

import pytest
import torch

from interp.evaluate import evaluate_tokens
from interp.studies.reproduce import HELD_OUT_N, SCALES, configs
from interp.tasks import held_out
from interp.training.loop import train

pytestmark = pytest.mark.slow

SEEDS = {"fot": 0, "tra": 1, "diff": 0, "trela": 0, "cope": 0, "tda": 0}
CHECK_EVERY = 100


@pytest.mark.parametrize("name", SEEDS)
def test_tiny_model_learns_the_task(name, tmp_path):
    torch.set_num_threads(1)  # the measured setting; other counts sum in another order
    model_cfg, train_cfg = configs(name, SEEDS[name], SCALES["learning"])
    train_cfg = dataclasses.replace(train_cfg, checkpoint_every=0, eval_n=10)
    checks = []
    for until in range(CHECK_EVERY, train_cfg.steps + 1, CHECK_EVERY):
        model = train(model_cfg, train_cfg, tmp_path / name, resume=until > CHECK_EVERY, progress=False, until=until)
        log = (tmp_path / name / "log.jsonl").read_text().splitlines()
        losses = [json.loads(line)["loss"] for line in log if '"loss"' in line]
        recent_loss = sum(losses[-10:]) / 10
        checks.append(f"step {until}: loss {recent_loss:.4f}")
        if recent_loss >= 0.05 * math.log(2):
            continue  # the loss alone rules this check out
        accuracy = evaluate_tokens(model, held_out(HELD_OUT_N, train_cfg.seq_len), "held-out").sequence_accuracy
        checks[-1] += f", {accuracy:.3f} of sequences right"
        if accuracy >= 0.98:
            return
    pytest.fail(f"{name} did not learn in {train_cfg.steps} steps (a clean loss far below chance and >= 98% of "
                f"{HELD_OUT_N} held-out sequences right): " + "; ".join(checks))
