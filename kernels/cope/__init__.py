"""Contextual Position Encoding (CoPE, Golovneva et al. 2024): ``reference``, ``rows``."""
