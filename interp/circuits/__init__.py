"""Circuits on any task: direct logit attribution (``attribution``), activation and path patching
(``patching``), attribution patching (``attribution_patching``), and the (clean, corrupt) pairs they
compare (``pairs``), each measured by a metric at the positions the task scores (``metrics``).

Conventions shared by every function of the package:

- The *task* (a registered :class:`interp.tasks.Task` or its name; default the one the model's
  checkpoint was trained on, else flip-flop) says which positions are scored and what the right
  answer is there (``Task.scored_answers``, from ``model_io`` and ``answer``). A model whose
  vocabulary or recorded task is not the task's is refused.
- ``tokens`` are what the model reads, ``[batch, pos]`` ids: the inputs of ``Task.model_io``
  (flip-flop: whole sequences without their final answer, ``full[:, :-1]``, or prefixes ending at
  an ``r``, ``model.to_tokens("w1i0r")``; ``w``=0, ``r``=1, ``i``=2, ``0``=3, ``1``=4).
- A *read* is a scored position (flip-flop: an ``r``); the model's answer is its prediction there.
- The *metric* is any callable ``(logits [batch, pos, d_vocab], scored) -> [batch]``
  (:mod:`interp.circuits.metrics`); the default, :func:`margin`, is the right answer's logit minus
  the best other answer's (flip-flop: the *logit difference* ``logit(right bit) - logit(other
  bit)``), positive when the model prefers the right answer. In a pair both runs are measured
  in the direction of the *clean* run's right answer. A task with one answer token has no margin:
  the default is refused, saying so.
- *Restored*: ``(patched - corrupt) / (clean - corrupt)`` of the metric; 1 means the patched
  activation alone turns the corrupt run's read into the clean one's, 0 that it changes nothing.
  Over several pairs, :func:`patching_summary` takes the ratio of the sums, so that a pair whose
  two runs nearly agree cannot dominate the mean.
- Pairs: the task's own counterfactual (:func:`corrupt_pairs`, ``Task.corrupt``), another
  sequence of the split at the same position (:func:`resample_pairs`, any task; :func:`task_pairs`
  picks), flip-flop's :func:`bit_flip_pairs` and :func:`glitch_pairs`.

Frames are tidy, one row per (component, read) or (patch, pair); nothing here draws (the
plots are ``interp.plots.dla_chart`` and ``interp.plots.patching_heatmap``).
"""

from interp.circuits.attribution import direct_logit_attribution, dla_sum_error, dla_summary
from interp.circuits.attribution_patching import (
    ATTRIBUTION_KINDS, attribution_agreement, attribution_patching, compare_attribution,
)
from interp.circuits.metrics import Metric, Scored, margin, resolve_task, scored_rows
from interp.circuits.pairs import (
    ReadPairs, bit_flip_pairs, corrupt_pairs, glitch_pairs, resample_pairs, task_pairs,
)
from interp.circuits.patching import (
    activation_patching, component_label, hook_axes, mechanism_hooks, patchable_hooks, patching_summary, path_patching,
    receiver_inputs,
)
from interp.circuits.reads import logit_difference, read_answers
