"""Flip-flop strings in the public dataset's text format (``w1i0i1r1``), and files of them.

Files are JSONL (one ``{"text": ...}`` object per line) or Parquet with a ``text``
column, so a local copy of the public dataset trains and evaluates unchanged.

Reading and writing check the same rules, in one place (:func:`check_tokens`, vectorised
over a whole batch): a file that ``write_sequences`` wrote is one that ``read_sequences``
reads, and nothing else is written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from interp.tasks.flipflop import D_VOCAB, IGNORE, READ, VOCAB, WRITE, ZERO
from models import validate as checks   # not to be confused with validate() below

_TOKEN_OF = {symbol: idx for idx, symbol in enumerate(VOCAB)}
_NOT_A_TOKEN = 255
# ASCII code -> token id (255: not in the alphabet), and back.
_ASCII_TO_TOKEN = np.full(256, _NOT_A_TOKEN, dtype=np.uint8)
for _symbol, _idx in _TOKEN_OF.items():
    _ASCII_TO_TOKEN[ord(_symbol)] = _idx
_TOKEN_TO_ASCII = np.frombuffer("".join(VOCAB).encode("ascii"), dtype=np.uint8)


class FlipFlopFormatError(ValueError):
    """A string that is not a valid flip-flop sequence. ``position``: the first bad index;
    ``sequence``: the index of the bad string in a batch; ``source``: where it came from
    (``file:line``), which then replaces the sequence index in the message."""

    def __init__(self, reason: str, position: int | None = None, text: str | None = None,
                 sequence: int | None = None, source: str | None = None):
        self.reason, self.position, self.text, self.sequence, self.source = reason, position, text, sequence, source
        prefix = f"{source}: " if source else ""
        which = f" in sequence {sequence}" if sequence is not None and not source else ""
        where = "" if position is None else f" at position {position}"
        context = ""
        if text is not None and position is not None:
            lo = max(0, position - 8)
            context = f": ...{text[lo:position]}[{text[position:position + 1]}]{text[position + 1:position + 9]}..."
        super().__init__(f"{prefix}invalid flip-flop string{which}{where}: {reason}{context}")

    def __reduce__(self):  # e.g. from a sweep's worker, pickled
        return type(self), (self.reason, self.position, self.text, self.sequence, self.source)

    def at(self, source: str) -> "FlipFlopFormatError":
        """The same error, located in a file."""
        return FlipFlopFormatError(self.reason, self.position, self.text, self.sequence, source)


def format_sequence(tokens) -> str:
    """Token ids -> text, e.g. ``[0, 4, 1, 4] -> 'w1r1'``."""
    tokens = np.asarray(checks.array("tokens", tokens, "integer", 1, lists=True, empty=True))
    if ((tokens < 0) | (tokens >= D_VOCAB)).any():
        raise ValueError(f"tokens: ids must lie in 0..{D_VOCAB - 1} ({' '.join(VOCAB)}), got {tokens.tolist()[:8]}")
    return "".join(VOCAB[int(t)] for t in tokens)


def check_tokens(tokens: np.ndarray) -> None:
    """Raise :class:`FlipFlopFormatError` naming the first offending sequence, position
    and rule, for ``[n, T]`` token ids (any integer dtype).

    Rules, in order: ids in the vocabulary, the length (even, >= 2), instructions at even
    positions and bits at odd ones, the first instruction is ``w``, the last is ``r``, and
    every read bit equals the bit of the most recent write. Checked in blocks of rows, so
    that the temporaries of the 10^5-sequence sparse split stay small.
    """
    n, length = checks.array("tokens", tokens, "integer", 2, empty=True).shape
    length_ok = length >= 2 and length % 2 == 0
    for lo in range(0, n, _BLOCK_ROWS):
        _check_block(tokens[lo:lo + _BLOCK_ROWS], lo, length_ok)
    if not length_ok:
        raise FlipFlopFormatError(f"length {length} is not a positive even number of (instruction, bit) pairs",
                                  length - 1 if length else None, _text(tokens[0]) if n else None, 0)


_BLOCK_ROWS = 4096


def _check_block(tokens: np.ndarray, first: int, length_ok: bool) -> None:
    """:func:`check_tokens` on rows ``first, first + 1, ...``; only the ids if the length is wrong."""

    def fail(bad: np.ndarray, reason, step: int = 1, offset: int = 0) -> None:
        """Raise for the first True of ``bad``, whose column j is token ``step * j + offset``."""
        if bad.any():
            row, col = divmod(int(np.argmax(bad)), bad.shape[1])
            pos = step * col + offset
            raise FlipFlopFormatError(reason(row, pos), pos, _text(tokens[row]), first + row)

    fail((tokens < 0) | (tokens >= D_VOCAB),
         lambda s, p: f"token id {tokens[s, p]} is not in the vocabulary 0..{D_VOCAB - 1} ({' '.join(VOCAB)})")
    if not length_ok:
        return
    instr, bits = tokens[:, 0::2], tokens[:, 1::2]
    wrong_kind = np.empty(tokens.shape, dtype=bool)
    wrong_kind[:, 0::2], wrong_kind[:, 1::2] = instr > IGNORE, bits < ZERO
    fail(wrong_kind, lambda s, p: (f"expected {'an instruction (w, r, i)' if p % 2 == 0 else 'a bit (0, 1)'}, "
                                   f"found {VOCAB[tokens[s, p]]!r}"))
    fail(instr[:, :1] != WRITE, lambda s, p: f"the first instruction must be 'w', found {VOCAB[tokens[s, p]]!r}")
    fail(instr[:, -1:] != READ, lambda s, p: f"the last instruction must be 'r', found {VOCAB[tokens[s, p]]!r}",
         offset=tokens.shape[1] - 2)
    # the bit of the most recent write before each pair (the first pair is a write, checked above)
    pairs = np.arange(instr.shape[1], dtype=np.int32)
    stored = np.take_along_axis(bits, np.maximum.accumulate(np.where(instr == WRITE, pairs, 0), axis=1), axis=1)
    fail((instr == READ) & (bits != stored), lambda s, p: (
        f"read returns {VOCAB[tokens[s, p]]!r} but the most recent write stored {VOCAB[stored[s, p // 2]]!r}"),
        step=2, offset=1)


def _text(row: np.ndarray) -> str:
    """A row as text for error context; ids outside the vocabulary show as ``?``."""
    return "".join(VOCAB[t] if 0 <= t < D_VOCAB else "?" for t in row.tolist())


def validate(text: str) -> None:
    """Raise :class:`FlipFlopFormatError` naming the first offending position and why
    (the alphabet, then the rules of :func:`check_tokens`)."""
    parse_sequence(text)


def parse_sequence(text: str) -> np.ndarray:
    """Validated text -> ``uint8`` token ids."""
    checks.text("text", text)
    try:
        return parse_sequences([text])[0]
    except FlipFlopFormatError as err:  # one string: no sequence index to name
        raise FlipFlopFormatError(err.reason, err.position, err.text) from None


def parse_sequences(texts: list[str]) -> np.ndarray:
    """Validated texts of one common length -> ``uint8 [n, T]``; errors name the sequence."""
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list of strings (parse_sequence reads one), got {checks.shown(texts)}")
    if not texts:
        raise ValueError("texts: no sequences to parse")
    for idx, text in enumerate(texts):
        if not isinstance(text, str):
            raise FlipFlopFormatError(f"expected a string, found {type(text).__name__} {text!r:.40}", sequence=idx)
        if len(text) != len(texts[0]):
            raise FlipFlopFormatError(f"sequences have different lengths ({len(text)} here, {len(texts[0])} in "
                                      "the first); batch them by length", text=text, sequence=idx)
    # One array of code points for the whole batch; anything outside ASCII is not a symbol.
    codes = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32).reshape(len(texts), -1)
    tokens = _ASCII_TO_TOKEN[np.minimum(codes, 255)]
    tokens[codes > 255] = _NOT_A_TOKEN
    unknown = tokens == _NOT_A_TOKEN
    if unknown.any():
        seq, pos = divmod(int(np.argmax(unknown)), codes.shape[1])
        raise FlipFlopFormatError(f"unknown symbol {texts[seq][pos]!r} (allowed: w r i 0 1)", pos, texts[seq], seq)
    try:
        check_tokens(tokens)
    except FlipFlopFormatError as err:  # the context is the text as given
        raise FlipFlopFormatError(err.reason, err.position, texts[err.sequence], err.sequence) from None
    return tokens


def write_sequences(tokens, path: str | os.PathLike) -> Path:
    """Write ``[n, T]`` token ids as text to ``.jsonl`` or ``.parquet`` (atomically), after
    checking them as :func:`read_sequences` does: integer ids only (``uint8``, what
    ``load_split`` returns, or any other integer dtype); floats are refused rather than
    rounded."""
    path = Path(path)
    if path.suffix not in (".jsonl", ".parquet"):
        raise ValueError(f"unsupported file type {path.suffix!r}: use .jsonl or .parquet")
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [n, T], got shape {tokens.shape}")
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"token ids must be integers, got dtype {tokens.dtype}")
    if len(tokens) == 0:
        raise ValueError("no sequences to write")
    check_tokens(tokens)
    raw = _TOKEN_TO_ASCII[tokens].tobytes().decode("ascii")
    length = tokens.shape[1]
    texts = [raw[i:i + length] for i in range(0, len(raw), length)]
    path.parent.mkdir(parents=True, exist_ok=True)
    from interp.outputs import staged_file

    with staged_file(path, overwrite=True) as tmp:   # a fresh file renamed into place, never through a link
        if path.suffix == ".jsonl":
            tmp.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
        else:
            import pandas as pd

            pd.DataFrame({"text": texts}).to_parquet(tmp, index=False)
    return path


def read_sequences(path: str | os.PathLike) -> np.ndarray:
    """Read and validate a ``.jsonl`` or ``.parquet`` file with a ``text`` column. Errors
    name the file and the line (JSONL) or row (Parquet, from 0) of the bad sequence."""
    from interp.outputs import input_file

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give a .jsonl or .parquet file")
    input_file(path, "data file")   # never a FIFO or a device (which would block), nor a huge file
    if path.suffix == ".jsonl":
        texts, lines = [], []
        with open(path, encoding="utf-8-sig") as f:  # a byte-order mark, as some editors write, is fine
            try:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        texts.append(json.loads(line)["text"])
                    except (json.JSONDecodeError, KeyError, TypeError):
                        raise ValueError(f"{path}:{lineno}: expected a JSON object with a 'text' field") from None
                    lines.append(f"{path}:{lineno}")
            except UnicodeDecodeError:
                raise ValueError(f"{path}: not UTF-8 text (after line {len(lines)}); is it a JSONL file?") from None
    elif path.suffix == ".parquet":
        import pandas as pd
        import pyarrow

        try:
            frame = pd.read_parquet(path)
        except (pyarrow.ArrowException, OSError) as err:
            raise ValueError(f"{path}: not a readable Parquet file ({err})") from None
        if "text" not in frame.columns:
            raise ValueError(f"{path}: no 'text' column (columns: {list(frame.columns)})")
        texts = frame["text"].tolist()
        lines = [f"{path}: row {row}" for row in range(len(texts))]
    else:
        raise ValueError(f"unsupported file type {path.suffix!r}: use .jsonl or .parquet")
    if not texts:
        raise ValueError(f"{path}: no sequences in the file")
    try:
        return parse_sequences(texts)
    except FlipFlopFormatError as err:
        raise err.at(lines[err.sequence]) from None
