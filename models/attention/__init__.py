"""Attention mechanisms, one file each, chosen by name from ``REGISTRY``; a mechanism of one's
own joins them through ``models.register_mechanism`` (``models.mechanisms``)."""

from models.attention import softmax  # noqa: F401  (each import registers its mechanisms)
from models.attention import fot, tra  # noqa: F401
from models.attention import cope, diff, tda  # noqa: F401
from models.attention import shaw  # noqa: F401
from models.attention.base import REGISTRY, Attention, get_attention_class, register
