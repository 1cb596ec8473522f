"""What a hunt leaves: the tables ``glitchlens hunt`` prints, and the files it writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from interp.hunt.search import HuntResult
from interp.tasks import write_sequences


def abbreviated(text: str, keep: int = 36) -> str:
    """A flip-flop string for a table cell: whole up to ``2 * keep`` characters, else its two ends."""
    return text if len(text) <= 2 * keep else f"{text[:keep]}...{text[-keep:]}"


# The columns of :func:`overview_rows`, each saying whether it counts over the whole hunt or
# measures the distribution the method ends on (the guided search's last generation of children; a
# random method's samples, whose distribution never changes), and whether it is a count or a rate.
OVERVIEW_COLUMNS = ("method", "from", "scored\n(total)", "failing seqs\n(total)", "read error\nrate (last gen.)",
                    "seq error\nrate (last gen.)", "error types\n(total)")
OVERVIEW_NOTE = ("total: a count over the whole hunt (scored: shrinking included; failing seqs: the distinct proposals "
                 "verified to fail); last gen.: a rate on the distribution the method ends on, the guided search's "
                 "last generation of children, a random method's samples")


def overview_rows(result: HuntResult) -> list[tuple[str, ...]]:
    """One table row per method (:data:`OVERVIEW_COLUMNS`): where it started, sequences scored,
    verified failing sequences, the read and sequence error rates on the distribution it ends on,
    and how many error types."""
    return [(name, m.summary["start"], str(m.summary["scored"]), str(m.summary["failing_sequences"]),
             f"{m.summary['final']['read_error_rate']:.2e}", f"{100 * m.summary['final']['sequence_error_rate']:.1f}%",
             str(len(m.summary["types"]))) for name, m in result.methods.items()]


def shortest_rows(result: HuntResult) -> list[tuple[str, ...]]:
    """One table row per (error type, method that found it): the shortest failing sequence's
    length, wrong read, gap, stale write (``-`` without one) and text (:func:`abbreviated`)."""
    found = sorted((error_type, name, shortest) for name, m in result.methods.items()
                   for error_type, shortest in m.summary["types"].items())
    return [(error_type, name, str(s["length"]), str(s["read_position"]), str(s["gap"]),
             str(s["read_position"] - s["stale_gap"]) if s["stale_gap"] >= 0 else "-", abbreviated(s["text"]))
            for error_type, name, s in found]


def write_hunt(result: HuntResult, out_dir) -> dict[str, Path]:
    """Write ``hunt.json`` (:meth:`HuntResult.summary` with the files) and each method's verified
    failing sequences, one ``.jsonl`` per method and length (``guided-T512.jsonl``; the shrunk
    ones in ``guided-shrunk-T18.jsonl``): a file holds the sequences of one length that
    :func:`verify` scored together, as ``glitchlens eval --data FILE`` scores them. Returns the
    paths by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, method in result.methods.items():
        for kind, sequences in (("", method.failing), ("-shrunk", method.shrunk)):
            for length in sorted({len(s) for s in sequences}):
                stem = f"{name.replace(' ', '-')}{kind}-T{length}"
                files[stem] = write_sequences(np.stack([s for s in sequences if len(s) == length]),
                                              out_dir / f"{stem}.jsonl")
    files["json"] = out_dir / "hunt.json"
    summary = {**result.summary(), "files": {stem: path.name for stem, path in files.items() if stem != "json"}}
    files["json"].write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    return files
