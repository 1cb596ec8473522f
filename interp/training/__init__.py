"""Training a model: ``glitchlens train``.

- :mod:`interp.training.setup`: what a run is built from (the config, the batches, the
  optimiser and its saved state, the sharpening regulariser, the output directory and its lock,
  Ctrl-C and divergence);
- :mod:`interp.training.loop`: the loop that runs it, checkpoints and resumes it;
- :mod:`interp.training.recipes`: named starting points (model and training fields) for
  ``glitchlens train --recipe``.

Nothing is imported here, so that ``import interp.training.recipes`` does not import torch.
"""
