"""Threshold rectified (``trela``) and threshold differential (``tda``) attention, TDA paper
Sec. 4: ``reference``, ``rows``, ``triton``."""
