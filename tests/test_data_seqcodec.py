"""Tests of coursepkg.data.SeqCodec: reserved ids, round trips, batches and errors."""

import string

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coursepkg.data import SeqCodec, dates_task

SMALL = settings(max_examples=60, deadline=None, derandomize=True)
SRC_CHARS = string.ascii_letters + string.digits + " ,./"
TGT_CHARS = "0123456789-"


def test_reserved_ids_and_character_ids():
    codec = SeqCodec("ba-")  # any order, sorted inside
    assert (SeqCodec.PAD, SeqCodec.BOS, SeqCodec.EOS) == (0, 1, 2)
    assert codec.vocab_size == 3 + 3
    assert codec.encode("-ab") == [3, 4, 5]  # sorted: "-" < "a" < "b", from id 3
    assert codec.encode("ab", bos=True, eos=True) == [1, 4, 5, 2]
    assert codec.encode("", bos=True) == [1] and codec.encode("") == []
    assert SeqCodec("aab").vocab_size == 5  # duplicates ignored


def test_docstring_example():
    codec = SeqCodec(TGT_CHARS)
    ids, lengths = codec.encode_batch(["12", "3"], eos=True)
    assert ids.tolist() == [[5, 6, 2], [7, 2, 0]]
    assert lengths.tolist() == [3, 2]
    assert codec.decode([5, 6, 2, 7]) == "12"


@SMALL
@given(st.text(alphabet=SRC_CHARS, max_size=30), st.booleans(), st.booleans())
def test_encode_decode_round_trip(text, bos, eos):
    codec = SeqCodec(SRC_CHARS)
    ids = codec.encode(text, bos=bos, eos=eos)
    assert len(ids) == len(text) + bos + eos
    body = ids[bos : len(ids) - eos]
    assert all(3 <= i < codec.vocab_size for i in body)  # characters never take a reserved id
    assert codec.decode(ids) == text
    assert codec.decode(torch.tensor(ids, dtype=torch.long)) == text


@SMALL
@given(st.lists(st.text(alphabet=TGT_CHARS, max_size=12), min_size=1, max_size=6), st.booleans(),
       st.booleans())
def test_encode_batch_pads_right_and_counts_lengths(texts, bos, eos):
    codec = SeqCodec(TGT_CHARS)
    ids, lengths = codec.encode_batch(texts, bos=bos, eos=eos)
    assert ids.dtype == lengths.dtype == torch.long
    expected = [len(t) + bos + eos for t in texts]
    assert lengths.tolist() == expected
    assert ids.shape == (len(texts), max(expected))
    for b, text in enumerate(texts):
        n = expected[b]
        assert ids[b, :n].tolist() == codec.encode(text, bos=bos, eos=eos)
        assert (ids[b, n:] == SeqCodec.PAD).all()
        assert codec.decode(ids[b]) == text  # padding and BOS are skipped


def test_decode_stops_at_eos_and_skips_pad_and_bos():
    codec = SeqCodec(TGT_CHARS)
    one, two, dash = codec.encode("12-")
    assert codec.decode([1, one, 0, two, 2, dash, one]) == "12"
    assert codec.decode([2, one]) == ""
    assert codec.decode([0, 0, 1, 1]) == ""
    assert codec.decode(torch.tensor([one, dash, two, 2, 0, 0])) == "1-2"


def test_unknown_character_is_named():
    codec = SeqCodec(TGT_CHARS)
    with pytest.raises(ValueError, match="'x'"):
        codec.encode("2021-x3")
    with pytest.raises(ValueError, match="'/'"):
        codec.encode_batch(["2021", "3/5"])


def test_empty_batch_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        SeqCodec(TGT_CHARS).encode_batch([])


def test_decode_rejects_ids_outside_the_vocabulary_naming_them():
    """Fails as of writing: decode shifts the id by 3 before the tokenizer checks it, so
    ``decode([99])`` says "id 96 is not in 0..10" instead of naming 99 and 0..13."""
    codec = SeqCodec(TGT_CHARS)
    for bad in (99, codec.vocab_size, -1):
        with pytest.raises(ValueError) as info:
            codec.decode([bad])
        assert str(bad) in str(info.value)
        assert str(codec.vocab_size - 1) in str(info.value)


def test_the_course_codecs_cover_every_date():
    src, tgt = SeqCodec(SRC_CHARS), SeqCodec(TGT_CHARS)
    pairs = dates_task(3000, generator=torch.Generator().manual_seed(0))
    for human, iso in pairs:
        assert src.decode(src.encode(human)) == human
        assert tgt.decode(tgt.encode(iso, eos=True)) == iso
