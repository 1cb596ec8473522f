"""Circuits at flip-flop reads: direct logit attribution (``attribution``), activation and path
patching (``patching``), and the (clean, corrupt) pairs they compare (``pairs``), all measured at
reads (``reads``).

Conventions shared by every function of the package:

- ``tokens`` are what the model reads, ``[batch, pos]`` ids (``w``=0, ``r``=1, ``i``=2,
  ``0``=3, ``1``=4): whole sequences without their final answer (``full[:, :-1]``), or
  prefixes ending at an ``r`` (``model.to_tokens("w1i0r")``). Whole sequences with their
  answer work too: no read sits at their last position.
- A *read* is a position holding an ``r``; the model's answer is its prediction there. The
  right answer is the bit of the most recent ``w`` before it, so it is read off the tokens.
- The *logit difference* at a read is ``logit(right bit) - logit(other bit)``: positive when
  the model prefers the right bit. In a pair both runs are measured in the direction of the
  *clean* run's right bit.
- *Restored*: ``(patched - corrupt) / (clean - corrupt)`` of that logit difference; 1 means
  the patched activation alone turns the corrupt run's read into the clean one's, 0 that it
  changes nothing. Over several pairs, :func:`patching_summary` takes the ratio of the sums,
  so that a pair whose two runs nearly agree cannot dominate the mean.

Frames are tidy, one row per (component, read) or (patch, pair); nothing here draws (the
plots are ``interp.plots.dla_chart`` and ``interp.plots.patching_heatmap``).
"""

from interp.circuits.attribution import direct_logit_attribution, dla_sum_error, dla_summary
from interp.circuits.pairs import ReadPairs, bit_flip_pairs, glitch_pairs
from interp.circuits.patching import (
    activation_patching, component_label, hook_axes, mechanism_hooks, patchable_hooks, patching_summary, path_patching,
    receiver_inputs,
)
from interp.circuits.reads import logit_difference, read_answers
