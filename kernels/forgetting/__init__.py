"""Forgetting attention (FoT, Lin et al. 2025): ``reference``, ``rows``, ``triton``."""
