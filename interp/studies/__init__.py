"""The papers' experiments run end to end: ``glitchlens reproduce`` and ``glitchlens pretrained``.

- :mod:`interp.studies.specimens`: every trained model the project names, in one place (the
  pretrained entries' names, descriptions and how each is trained);
- :mod:`interp.studies.pretrained`: building and listing the pretrained entries;
- :mod:`interp.studies.scales`: the scales of a Table 1 sweep (preset, recipe, training budget);
- :mod:`interp.studies.reproduce`: Table 1 and the recipe comparison, and the train-and-evaluate
  step every study run shares;
- :mod:`interp.studies.registry`: the claim studies (``reproduce app-a``, ``tda-threshold``, ...),
  their runs, rules and summaries;
- :mod:`interp.studies.cope_tasks`: the CoPE paper's counting and selective-copy study;
- :mod:`interp.studies.sweeps`: running a study's runs in parallel, here or on Ray;
- :mod:`interp.studies.seed_groups`: the seeds of a configuration trained as one batched model
  (``reproduce --batch-seeds``, ``glitchlens campaign``);
- :mod:`interp.studies.campaign`: a plan of the studies' runs on one device, within a time budget.

Nothing is imported here, so that listing the entries (``glitchlens pretrained``) does not
import torch.
"""
