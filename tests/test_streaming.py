"""The corpus loop's shared pieces."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from bertscope.analyses.streaming import WordPieces, pad_batch, padded


@pytest.mark.parametrize(
    "options",
    [
        dict(return_special_tokens_mask=True),
        dict(return_attention_mask=False, return_token_type_ids=False),  # the attention mask is made by padding
        dict(pairs=True, return_special_tokens_mask=True),
        dict(left=True, return_special_tokens_mask=True),  # a tokenizer that pads on the left
    ],
)
def test_pad_batch_pads_as_the_tokenizer_does(tiny_session, options):
    tokenizer = copy.deepcopy(tiny_session.tokenizer)
    tokenizer.padding_side = "left" if options.pop("left", False) else "right"
    texts = ["A short one.", "A somewhat longer sentence, with a comma and more words in it.", "Mid-length: three, four."]
    pairs = ["Its pair.", "Another", "And a third pair sentence here."] if options.pop("pairs", False) else None
    encoded = tokenizer(texts, pairs, truncation=True, **options)
    for indices in ([0, 1, 2], [2, 0], [1]):
        expected = tokenizer.pad({key: [values[index] for index in indices] for key, values in encoded.items()}, return_tensors="pt")
        found = pad_batch(tokenizer, encoded, indices)
        assert found.keys() == expected.keys()
        for key in found:
            assert found[key].dtype == expected[key].dtype and torch.equal(found[key], expected[key]), key


def test_padded_fills_each_column_after_each_item():
    table, real = padded([2, 3, 1], [(np.array([1, 2, 3, 4, 5, 6]), 0), (np.array([7, 8, 9, 10, 11, 12]), -1)])
    assert real.tolist() == [[True, True, False], [True, True, True], [True, False, False]]
    assert table.tolist() == [[[1, 2, 0], [3, 4, 5], [6, 0, 0]], [[7, 8, -1], [9, 10, 11], [12, -1, -1]]]
    assert table.dtype == np.int64
    table, real = padded([2, 1], [(np.array([1, 2, 3]), 0)], left=True)
    assert real.tolist() == [[True, True], [False, True]] and table.tolist() == [[[1, 2], [0, 3]]]


def test_word_pieces_are_every_token_of_a_word_in_a_real_tokenizers_rows(tiny_session):
    words = [["Unbelievably", ",", "it", "worked"], ["a", "\u200b", "b"], ["x"] * 600, ["Ok"]]  # sub-words, a word of no token, a cut
    encoded = tiny_session.tokenizer(words, is_split_into_words=True, truncation=True, max_length=512)
    rows = [encoded.word_ids(index) for index in range(len(words))]
    pieces = WordPieces.of(rows)
    expected = [(row, position, word) for row, ids in enumerate(rows) for position, word in enumerate(ids) if word is not None]
    assert list(zip(pieces.rows.tolist(), pieces.positions.tolist(), pieces.words.tolist(), strict=True)) == expected
    starts = pieces.starts()
    found = [starts.words[here].tolist() for here in starts.per_row(len(rows))]
    assert found[0] == [0, 1, 2, 3]
    assert pieces.per_row(4)[0].stop - pieces.per_row(4)[0].start > 4  # "Unbelievably" is several pieces, each a row
    assert found[1] == [0, 2]  # the zero-width space makes no token: no row
    assert found[2] == list(range(510))  # [CLS] and [SEP] keep two of the 512 places
    assert found[3] == [0] and starts.rows[-1] == 3
