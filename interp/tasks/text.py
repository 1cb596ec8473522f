"""Flip-flop strings in the public dataset's text format (``w1i0i1r1``), and files of them.

Files are JSONL (one ``{"text": ...}`` object per line) or Parquet with a ``text``
column, so a local copy of the public dataset trains and evaluates unchanged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from interp.tasks.flipflop import VOCAB

_TOKEN_OF = {symbol: idx for idx, symbol in enumerate(VOCAB)}
_INSTRUCTIONS = "wri"
_BITS = "01"


class FlipFlopFormatError(ValueError):
    """A string that is not a valid flip-flop sequence; ``position`` is the first bad index."""

    def __init__(self, reason: str, position: int | None = None, text: str | None = None):
        self.reason = reason
        self.position = position
        where = "" if position is None else f" at position {position}"
        context = ""
        if text is not None and position is not None:
            lo = max(0, position - 8)
            context = f": ...{text[lo:position]}[{text[position:position + 1]}]{text[position + 1:position + 9]}..."
        super().__init__(f"invalid flip-flop string{where}: {reason}{context}")


def format_sequence(tokens) -> str:
    """Token ids -> text, e.g. ``[0, 4, 1, 4] -> 'w1r1'``."""
    return "".join(VOCAB[int(t)] for t in tokens)


def validate(text: str) -> None:
    """Raise :class:`FlipFlopFormatError` naming the first offending position and why.

    Checks, in order: the alphabet, the length (even, >= 2), instructions at even
    positions and bits at odd ones, the first instruction is ``w``, the last is ``r``,
    and every read bit equals the bit of the most recent write.
    """
    for pos, ch in enumerate(text):
        if ch not in _TOKEN_OF:
            raise FlipFlopFormatError(f"unknown symbol {ch!r} (allowed: w r i 0 1)", pos, text)
    if len(text) < 2 or len(text) % 2:
        raise FlipFlopFormatError(
            f"length {len(text)} is not a positive even number of (instruction, bit) pairs",
            len(text) - 1 if text else None, text)
    for pos, ch in enumerate(text):
        expected = _INSTRUCTIONS if pos % 2 == 0 else _BITS
        if ch not in expected:
            kind = "an instruction (w, r, i)" if pos % 2 == 0 else "a bit (0, 1)"
            raise FlipFlopFormatError(f"expected {kind}, found {ch!r}", pos, text)
    if text[0] != "w":
        raise FlipFlopFormatError(f"the first instruction must be 'w', found {text[0]!r}", 0, text)
    if text[-2] != "r":
        raise FlipFlopFormatError(f"the last instruction must be 'r', found {text[-2]!r}", len(text) - 2, text)
    memory = None
    for pos in range(0, len(text), 2):
        instr, bit = text[pos], text[pos + 1]
        if instr == "w":
            memory = bit
        elif instr == "r" and bit != memory:
            raise FlipFlopFormatError(
                f"read returns {bit!r} but the most recent write stored {memory!r}", pos + 1, text)


def parse_sequence(text: str) -> np.ndarray:
    """Validated text -> ``uint8`` token ids."""
    validate(text)
    return _ASCII_TO_TOKEN[np.frombuffer(text.encode("ascii"), dtype=np.uint8)]


_ASCII_TO_TOKEN = np.zeros(256, dtype=np.uint8)
for _symbol, _idx in _TOKEN_OF.items():
    _ASCII_TO_TOKEN[ord(_symbol)] = _idx


def parse_sequences(texts: list[str]) -> np.ndarray:
    """Validated texts of one common length -> ``uint8 [n, T]``."""
    if not texts:
        raise ValueError("no sequences to parse")
    lengths = {len(t) for t in texts}
    if len(lengths) > 1:
        raise ValueError(f"sequences have different lengths {sorted(lengths)[:5]}; batch them by length")
    rows = []
    for idx, text in enumerate(texts):
        try:
            rows.append(parse_sequence(text))
        except FlipFlopFormatError as err:
            raise FlipFlopFormatError(f"sequence {idx}: {err.reason}", err.position, text) from None
    return np.stack(rows)


def write_sequences(tokens: np.ndarray, path: str | os.PathLike) -> Path:
    """Write ``[n, T]`` token ids as text to ``.jsonl`` or ``.parquet`` (atomically)."""
    path = Path(path)
    texts = [format_sequence(row) for row in tokens]
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".jsonl":
        with open(tmp, "w") as f:
            for text in texts:
                f.write(json.dumps({"text": text}) + "\n")
    elif path.suffix == ".parquet":
        import pandas as pd

        pd.DataFrame({"text": texts}).to_parquet(tmp, index=False)
    else:
        raise ValueError(f"unsupported file type {path.suffix!r}: use .jsonl or .parquet")
    os.replace(tmp, path)
    return path


def read_sequences(path: str | os.PathLike) -> np.ndarray:
    """Read and validate a ``.jsonl`` or ``.parquet`` file with a ``text`` column."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.suffix == ".jsonl":
        texts = []
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    texts.append(json.loads(line)["text"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise ValueError(f"{path}:{lineno}: expected a JSON object with a 'text' field") from None
    elif path.suffix == ".parquet":
        import pandas as pd

        frame = pd.read_parquet(path)
        if "text" not in frame.columns:
            raise ValueError(f"{path}: no 'text' column (columns: {list(frame.columns)})")
        texts = frame["text"].tolist()
    else:
        raise ValueError(f"unsupported file type {path.suffix!r}: use .jsonl or .parquet")
    return parse_sequences(texts)

