"""Tokens as a person reads them (model.labels), with the real tokenizers of tests/family_models.py."""

from __future__ import annotations

import pytest

from bertscope.model.labels import token_labels
from tests.family_models import family_tokenizer

TEXT = "The keys to the cabinet, postman!"


def tokenised(family: str, text: str = TEXT, pair: str | None = "Where are the keys?") -> tuple[list[str], list[int]]:
    tokenizer = family_tokenizer(family)
    ids = tokenizer(text, pair)["input_ids"]
    return tokenizer.convert_ids_to_tokens(ids), tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True)


@pytest.mark.parametrize("family, marker", [("modernbert", "Ġ"), ("albert", "▁"), ("deberta-v2", "▁")])
def test_byte_level_and_sentencepiece_tokens_read_as_wordpiece_ones(family, marker):
    tokens, special = tokenised(family)
    assert any(token.startswith(marker) for token in tokens)  # the tokenizer's own marks, which the labels drop
    labels = token_labels(tokens, special)
    assert len(labels) == len(tokens)
    assert not any(marker in label for label in labels)
    words = [label.lower() for label in labels]
    assert words[1:3] == ["the", "keys"] and "where" in "".join(words).replace("##", "")
    for label, token, is_special in zip(labels, tokens, special):
        if is_special:
            assert label == token  # [CLS], [SEP] as they are
    # a word's later pieces carry WordPiece's mark, its first piece and punctuation none: the words read back
    text = "".join(label[2:] if label.startswith("##") else " " + label for label, is_special in zip(labels, special) if not is_special)
    assert "cabinet" in text.split() and "postman" in text.split() and "," in text.split()
    assert token_labels(tokens) == labels  # special tokens told by their look, where no flags are given


def test_wordpiece_tokens_are_left_as_they_are():
    tokens, special = tokenised("distilbert")
    assert "##man" in tokens
    assert token_labels(tokens, special) == tuple(tokens)


def test_byte_level_bytes_are_decoded_and_a_bare_word_start_shows():
    assert token_labels(["<s>", "caf", "Ã©", "Ġna", "Ã¯", "ve", "Ġ", "ĊĊ", "</s>"], [1, 0, 0, 0, 0, 0, 0, 0, 1]) == (
        "<s>",
        "caf",
        "##é",
        "na",
        "##ï",
        "##ve",
        "▁",
        "▁",
        "</s>",
    )
    assert token_labels(["Ġx", "Ã"]) == ("x", "\\xc3")  # a byte that is only part of a character
    assert token_labels(["▁The", "▁", "n", "a"]) == ("The", "▁", "n", "##a")


@pytest.mark.parametrize("text", [TEXT, "The keys to the cabinet are on the table."])  # the second has a bare ▁ in ALBERT's
def test_labels_of_labels_are_the_same(text):
    for family in ("modernbert", "albert", "distilbert"):
        tokens, special = tokenised(family, text)
        labels = token_labels(tokens, special)
        assert token_labels(labels, special) == labels


def test_a_figure_labels_tokens_as_the_explorer_does():
    import numpy as np

    from bertscope.model.masks import HeadMask
    from bertscope.model.results import Encoding, ForwardResult

    tokens, special = tokenised("modernbert", pair=None)
    size = len(tokens)
    encoding = Encoding(
        text=TEXT,
        pair=None,
        tokens=tuple(tokens),
        input_ids=np.arange(size),
        token_type_ids=np.zeros(size, dtype=int),
        special=np.array(special, dtype=bool),
        word_ids=(None,) * size,
        segment_ids=(None,) * size,
    )
    attentions = np.full((1, 1, size, size), 1.0 / size)
    result = ForwardResult(encoding, np.zeros((2, size, 4)), attentions, None, None, HeadMask.none(1, 1), "zero")
    axes = result.figure(layer=0, head=0).axes[0]
    shown = [label.get_text() for label in axes.get_yticklabels()]
    assert shown == list(token_labels(tokens, special)) and not any("Ġ" in label for label in shown)
