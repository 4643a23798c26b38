"""Tokenising a sentence or a sentence pair, keeping track of words and segments."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from bertscope.core.errors import InputError
from bertscope.core.model.results import Encoding

if TYPE_CHECKING:  # only in annotations
    from transformers import PreTrainedTokenizerBase


def encode(tokenizer: PreTrainedTokenizerBase, text: str, pair: str | None, max_length: int) -> Encoding:
    """Tokenise with special tokens; over-long input is truncated and the cut counted."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("the text is empty; give a sentence to analyse")
    if pair is not None and not pair.strip():
        raise InputError("the pair text is empty; give a second sentence or leave the pair out", setting="pair")
    options = dict(add_special_tokens=True, return_token_type_ids=True, return_special_tokens_mask=True, verbose=False)
    encoded = tokenizer(text, pair, truncation=False, **options)
    full_length = len(encoded["input_ids"])
    if full_length > max_length:  # tokenise again only when the input must be cut
        encoded = tokenizer(text, pair, truncation="longest_first", max_length=max_length, **options)
    input_ids = encoded["input_ids"]
    token_type_ids = encoded.get("token_type_ids") or [0] * len(input_ids)
    return Encoding(
        text=text,
        pair=pair,
        tokens=tuple(encoded.tokens()),
        input_ids=np.asarray(input_ids, dtype=np.int64),
        token_type_ids=np.asarray(token_type_ids, dtype=np.int64),
        special=np.asarray(encoded["special_tokens_mask"], dtype=bool),
        word_ids=tuple(encoded.word_ids()),
        segment_ids=tuple(encoded.sequence_ids()),
        truncated=full_length - len(input_ids),
    )
