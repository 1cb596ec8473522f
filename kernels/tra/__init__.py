"""Threshold Relative Attention (TRA paper, Sec. 2): ``reference``, ``rows``, ``triton``."""
