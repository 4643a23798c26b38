"""Per-head figures of one sentence's attention, in numpy (no torch, so the UI can use them).

Each figure is averaged over the query tokens: where the head's attention goes ([CLS],
[SEP], punctuation, itself, its neighbours) after Clark et al. 2019, and how spread out
it is (entropy in nats, mean distance in tokens).
"""

from __future__ import annotations

import functools
import threading
import unicodedata
import weakref
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

FIGURES: dict[str, str] = {
    "entropy": "attention entropy (nats)",
    "cls": "attention to [CLS]",
    "sep": "attention to [SEP]",
    "punct": "attention to punctuation",
    "self": "attention to the token itself",
    "prev": "attention to the previous token",
    "next": "attention to the next token",
    "distance": "mean attention distance (tokens)",
}
_punctuation: weakref.WeakKeyDictionary[Any, PunctuationIds] = weakref.WeakKeyDictionary()  # by tokenizer
_punctuation_lock = threading.Lock()


@functools.lru_cache(maxsize=1 << 16)  # asked of every token of every sentence by corpus jobs; a vocabulary's worth kept
def is_punctuation(token: str) -> bool:
    text = token.removeprefix("##").removeprefix("Ġ").removeprefix("▁")
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def punctuation_ids(tokenizer: Any) -> PunctuationIds:
    """The tokenizer's PunctuationIds, one while it lives: every corpus job of a session shares it."""
    with _punctuation_lock:
        if tokenizer not in _punctuation:
            _punctuation[tokenizer] = PunctuationIds(tokenizer)
        return _punctuation[tokenizer]


class PunctuationIds:
    """Which of a tokenizer's token ids are punctuation (`is_punctuation` of their token), for an array of ids at once.

    A corpus job asks it of every token of every batch: each id is converted to its token and tested the first time
    an array holds it, and after that looked up in an array indexed by id (no Python step a token).
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = weakref.ref(tokenizer)  # not the tokenizer itself: it is the key `punctuation_ids` keeps this by
        self.known = np.zeros(0, dtype=bool)  # by id: tested already
        self.punctuation = np.zeros(0, dtype=bool)  # by id: its token is punctuation
        self.lock = threading.Lock()  # jobs in several threads may share it

    def __call__(self, ids: np.ndarray) -> npt.NDArray[np.bool_]:
        """A bool array of the shape of `ids` (non-negative ints)."""
        with self.lock:
            if ids.size and ids.max() >= len(self.known):
                grown = int(ids.max()) + 1 - len(self.known)
                self.known = np.concatenate([self.known, np.zeros(grown, dtype=bool)])
                self.punctuation = np.concatenate([self.punctuation, np.zeros(grown, dtype=bool)])
            new = np.unique(ids[~self.known[ids]])
            if new.size:
                tokenizer = self.tokenizer()
                assert tokenizer is not None, "a caller that asks holds the tokenizer"
                tokens = tokenizer.convert_ids_to_tokens(new.tolist())
                self.punctuation[new] = [is_punctuation(token) for token in tokens]
                self.known[new] = True
            return cast(npt.NDArray[np.bool_], self.punctuation[ids])


def head_figures(attentions: np.ndarray, tokens: Sequence[str], special: np.ndarray) -> dict[str, np.ndarray]:
    """Every figure of FIGURES as an `[L, H]` array, from `[L, H, T, T]` attentions.

    Written to make no `[L, H, T, T]` temporaries beyond one (the logarithms): the shares go
    through one matrix product, the sums over keys through einsum, so that a 2,000-token
    layer (48M weights) is reduced in a fraction of a second."""
    attentions = np.asarray(attentions, dtype=np.float32)
    length = attentions.shape[-1]
    special = np.asarray(special, dtype=bool)
    first_special = np.zeros(length, dtype=bool)
    first_special[0] = special[0]  # [CLS] / <s>
    later_special = special & ~first_special  # [SEP] / </s>
    punctuation = np.array([is_punctuation(t) and not s for t, s in zip(tokens, special)], dtype=bool)
    keys = np.stack([first_special, later_special, punctuation], axis=1).astype(np.float32)  # [T, 3]
    shares = (attentions @ keys).mean(-2)  # [L, H, 3]: the share of each row on those keys, averaged over rows
    positions = np.arange(length, dtype=np.float32)
    distance = np.abs(positions[:, None] - positions[None, :])
    logs = np.zeros_like(attentions)
    np.log(attentions, out=logs, where=attentions > 0)  # 0 · log 0 counts as 0
    figures = {
        "entropy": -np.einsum("...ij,...ij->...i", attentions, logs).mean(-1),
        "cls": shares[..., 0],
        "sep": shares[..., 1],
        "punct": shares[..., 2],
        "self": np.diagonal(attentions, axis1=-2, axis2=-1).mean(-1),
        "prev": _offset_mean(attentions, -1),
        "next": _offset_mean(attentions, 1),
        "distance": np.einsum("...ij,ij->...i", attentions, distance).mean(-1),
    }
    return {name: figures[name].astype(np.float32) for name in FIGURES}


def figure_range(name: str, length: int) -> tuple[float, float]:
    """The scale to shade a figure on: shares are 0-1, entropy up to log T, distance up to T-1."""
    if name == "entropy":
        return 0.0, float(np.log(max(length, 2)))
    if name == "distance":
        return 0.0, float(max(length - 1, 1))
    return 0.0, 1.0


def _offset_mean(attentions: np.ndarray, offset: int) -> npt.NDArray[np.floating[Any]]:
    """Mean weight from token i to token i+offset, over the queries that have such a neighbour."""
    length = attentions.shape[-1]
    if length < 2:
        return np.zeros(attentions.shape[:-2])
    return cast(npt.NDArray[np.floating[Any]], np.diagonal(attentions, offset=offset, axis1=-2, axis2=-1).mean(-1))
