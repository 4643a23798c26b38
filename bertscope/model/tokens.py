"""Tokenising a sentence or a sentence pair, keeping track of words and segments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from bertscope.base.errors import InputError
from bertscope.model.results import Encoding

if TYPE_CHECKING:  # only in annotations
    from transformers import BatchEncoding, PreTrainedTokenizerBase


def encode(tokenizer: PreTrainedTokenizerBase, text: str, pair: str | None, max_length: int) -> Encoding:
    """Tokenise with special tokens; over-long input is truncated and the cut counted."""
    return encode_many(tokenizer, [text], [pair], max_length)[0]


def encode_many(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], pairs: Sequence[str | None], max_length: int) -> list[Encoding]:
    """`encode` of each text and its pair, in one tokenizer call for the texts alone and one for the pairs: for a
    corpus, a call a sentence costs more than a small model's pass over it."""
    for text, pair in zip(texts, pairs, strict=True):
        if not isinstance(text, str) or not text.strip():
            raise InputError("the text is empty; give a sentence to analyse")
        if pair is not None and not pair.strip():
            raise InputError("the pair text is empty; give a second sentence or leave the pair out", setting="pair")
    found: list[Encoding | None] = [None] * len(texts)
    for with_pairs in (False, True):
        rows = [index for index, pair in enumerate(pairs) if (pair is not None) == with_pairs]
        if not rows:
            continue
        group = [texts[index] for index in rows]
        group_pairs = [pairs[index] for index in rows] if with_pairs else None
        encoded = tokenizer(group, group_pairs, truncation=False, **_OPTIONS)
        for row, index in enumerate(rows):
            full_length = len(encoded["input_ids"][row])
            if full_length > max_length:  # tokenise again only when the input must be cut
                cut = tokenizer(
                    [texts[index]], [pairs[index]] if with_pairs else None, truncation="longest_first", max_length=max_length, **_OPTIONS
                )
                found[index] = _encoding(texts[index], pairs[index], cut, 0, full_length)
            else:
                found[index] = _encoding(texts[index], pairs[index], encoded, row, full_length)
    return cast(list[Encoding], found)


# No attention mask: an Encoding has none (a batch's is made where it is padded), and its lists cost 5 µs a sentence
_OPTIONS: dict[str, Any] = dict(
    add_special_tokens=True, return_token_type_ids=True, return_special_tokens_mask=True, return_attention_mask=False, verbose=False
)


def _encoding(text: str, pair: str | None, encoded: BatchEncoding, row: int, full_length: int) -> Encoding:
    """Row `row` of a batched tokenizer output as an Encoding; `full_length` is its length before any cut."""
    input_ids = encoded["input_ids"][row]
    token_type_ids = encoded["token_type_ids"][row] if encoded.get("token_type_ids") else [0] * len(input_ids)
    return Encoding(
        text=text,
        pair=pair,
        tokens=tuple(encoded.tokens(row)),
        input_ids=np.asarray(input_ids, dtype=np.int64),
        token_type_ids=np.asarray(token_type_ids, dtype=np.int64),
        special=np.asarray(encoded["special_tokens_mask"][row], dtype=bool),
        word_ids=tuple(encoded.word_ids(row)),
        segment_ids=tuple(encoded.sequence_ids(row)),
        truncated=full_length - len(input_ids),
    )
