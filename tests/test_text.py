import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.tasks import (
    FlipFlopFormatError, format_sequence, load_split, parse_sequence, parse_sequences, read_sequences,
    validate, write_sequences,
)


def test_round_trip_canonical():
    tokens = load_split("iid", 20)
    texts = [format_sequence(row) for row in tokens]
    assert texts[0].startswith("w") and texts[0][-2] == "r" and len(texts[0]) == 512
    assert np.array_equal(parse_sequences(texts), tokens)


@pytest.mark.parametrize("text, position, reason", [
    ("w1x0r1", 2, "unknown symbol"),
    ("w1i0r", 4, "length"),
    ("", None, "length"),
    ("w1ir01", 3, "expected a bit"),
    ("1wr1", 0, "expected an instruction"),
    ("i1r1", 0, "first instruction"),
    ("w1i0", 2, "last instruction"),
    ("w1i0r0", 5, "read returns '0'"),
    ("w0w1r1r0", 7, "read returns '0'"),
])
def test_validation_errors(text, position, reason):
    with pytest.raises(FlipFlopFormatError, match=reason) as err:
        validate(text)
    assert err.value.position == position


def test_batch_errors_name_the_sequence():
    with pytest.raises(FlipFlopFormatError, match="sequence 1"):
        parse_sequences(["w1r1", "w1r0"])
    with pytest.raises(ValueError, match="different lengths"):
        parse_sequences(["w1r1", "w1i0r1"])


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_file_round_trip(tmp_path, suffix):
    tokens = load_split("dense", 7)
    path = write_sequences(tokens, tmp_path / f"seqs{suffix}")
    assert np.array_equal(read_sequences(path), tokens)


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"txt": "w1r1"}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_sequences(bad)
    other = tmp_path / "seqs.txt"
    other.write_text("w1r1\n")
    with pytest.raises(ValueError, match="unsupported file type"):
        read_sequences(other)
    with pytest.raises(ValueError, match="unsupported file type"):
        write_sequences(load_split("iid", 1), other)
    with pytest.raises(FileNotFoundError):
        read_sequences(tmp_path / "missing.jsonl")


def _valid_strings():
    pairs = st.lists(st.tuples(st.sampled_from("wri"), st.sampled_from("01")), min_size=1, max_size=40)

    def build(body):
        memory, out = None, []
        body = [("w", body[0][1])] + body[1:] + [("r", "0")]
        for instr, bit in body:
            if instr == "w":
                memory = bit
            elif instr == "r":
                bit = memory
            out.append(instr + bit)
        return "".join(out)

    return pairs.map(build)


@settings(max_examples=300, deadline=None)
@given(_valid_strings())
def test_fuzz_valid_round_trip(text):
    assert format_sequence(parse_sequence(text)) == text


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="wri01x ", max_size=30))
def test_fuzz_random_strings(text):
    """Random strings either parse and round-trip, or fail with a position inside the string."""
    try:
        tokens = parse_sequence(text)
    except FlipFlopFormatError as err:
        assert err.position is None or 0 <= err.position < len(text)
        assert "invalid flip-flop string" in str(err)
    else:
        assert format_sequence(tokens) == text
