"""Direct logit attribution and activation patching of single glitches, on any task, for the
diagnosis and its glitch browser (:mod:`interp.diagnose.browser`).

- DLA: :func:`interp.circuits.direct_logit_attribution` at the glitch's position, with the task's
  margin (the right answer's logit minus the best other answer's): the :data:`TOP` components
  of largest |attribution|.
- Patching: the glitch's run is the *corrupt* one; its *clean* partner is another sequence of the
  same split that the model answers right at the same position, one with the same right answer
  if there is one (a resample pair); the margin is measured in the direction of the partner's
  right answer. Every head's ``hook_z`` and every MLP output is patched from the partner into
  the glitch, at every position (:func:`interp.circuits.activation_patching`): *restored* is the
  share of the margin gap between the two runs that the component alone closes. A glitch with no
  such partner in the evaluated sequences has no patching.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

TOP = 10          # components per glitch, by |attribution| or |restored|


def _top(frame: pd.DataFrame, column: str) -> list[list]:
    # restored, (patched - corrupt) / (clean - corrupt), is undefined where the clean and corrupt
    # runs agree: NaN, or infinite where the patched run does not agree with them
    frame = frame[np.isfinite(frame[column])]
    chosen = frame.reindex(frame[column].abs().sort_values(ascending=False).index).head(TOP)
    return [[str(c), round(float(v), 4)] for c, v in zip(chosen.component, chosen[column])]


def partners(answers: pd.DataFrame, glitches: pd.DataFrame) -> np.ndarray:
    """For each glitch (``seq, position``) of one split, the sequence of its clean partner among
    ``answers`` (that split's ``seq, position, target, correct``: every answer evaluated): one
    the model answers right at the same position, with the glitch's right answer if one does;
    -1 where none does."""
    keyed = answers.set_index(["seq", "position"]).target
    right = answers[answers.correct]
    found = []
    for seq, position in zip(glitches.seq, glitches.position):
        there = right[(right.position == position) & (right.seq != seq)]
        other = (there.target != keyed[seq, position]).to_numpy()
        found.append(int(there.seq.to_numpy()[np.argsort(other, kind="stable")][0]) if len(there) else -1)
    return np.asarray(found, dtype=np.int64)


def patch_glitches(model, task, inputs: np.ndarray, glitches: pd.DataFrame, partner: np.ndarray,
                   components: list[str]) -> pd.DataFrame:
    """:func:`interp.circuits.activation_patching` of ``components`` from each glitch's partner
    (``partner``, from :func:`partners`) into the glitch, for the glitches that have one; rows of
    ``glitches`` are pairs in order (``pair`` k: the k-th glitch with a partner), labelled
    ``component``. Empty when no glitch has a partner."""
    from interp import circuits

    paired = partner >= 0
    if not paired.any():
        return pd.DataFrame()
    chosen = glitches[paired]
    stop = int(chosen.position.max()) + 1
    patched = circuits.activation_patching(model, inputs[partner[paired], :stop], inputs[chosen.seq.to_numpy(), :stop],
                                           components, reads=chosen.position.to_numpy().copy(), task=task)
    return patched.assign(component=[circuits.component_label(h, layer, head)
                                     for h, layer, head in zip(patched.hook, patched.layer, patched["head"])])


def glitch_circuits(model, task, inputs: dict[str, np.ndarray], answers: pd.DataFrame
                    ) -> tuple[Callable | None, dict[str, str]]:
    """``(compute, skipped)``: ``compute(split, rows)`` gives ``{row index: {"dla": [[component,
    attribution]], "patching": [[component, restored]]}}`` for glitches ``rows`` (columns ``seq,
    position``) of ``split``, whose inputs are ``inputs[split]``; ``answers`` (``split, seq,
    position, target, correct``: every answer evaluated) supplies the clean partners.
    ``compute`` is None, with the reason in ``skipped``, where the model has no residual stream
    or the task no margin."""
    from interp import circuits

    if not hasattr(model, "blocks"):
        reason = f"the {model.cfg.model} model has no heads or residual stream to attribute or patch"
        return None, {"dla": reason, "patching": reason}
    if len(task.answers) < 2:
        reason = (f"the {task.name} task has one answer token, so no margin (right answer minus the best other) "
                  "to attribute")
        return None, {"dla": reason, "patching": reason}
    components = circuits.patchable_hooks(model, ("z", "mlp_out"))

    def compute(split: str, rows: pd.DataFrame) -> dict:
        tokens = inputs[split][rows.seq.to_numpy(), :int(rows.position.max()) + 1]
        dla = circuits.direct_logit_attribution(model, tokens, task=task)
        found = {index: {"dla": _top(dla[(dla.seq == k) & (dla.position == row.position)], "attribution")}
                 for k, (index, row) in enumerate(rows.iterrows())}
        partner = partners(answers[answers.split == split], rows)
        patched = patch_glitches(model, task, inputs[split], rows, partner, components)
        for k, index in enumerate(rows.index[partner >= 0]):
            found[index]["patching"] = _top(patched[patched.pair == k], "restored")
        return found

    return compute, {}
