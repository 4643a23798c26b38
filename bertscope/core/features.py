"""Every layer's representation of words or sentences, for probing, with an on-disk cache.

One forward pass per batch gives all L+1 hidden-state layers (index 0 = embeddings). Words
are pooled from their sub-word tokens (`first` or `mean`); sentences are the [CLS] vector
or the mean of the real, non-special tokens. Results are cached on disk, keyed by the
model's fingerprint, a hash of the data and the options; entries are written atomically,
and an entry that does not load cleanly is computed again, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from bertscope.core.corpus import Sentence
from bertscope.core.errors import InputError
from bertscope.core.masks import Ablation
from bertscope.files import atomic_write

CACHE_VERSION = 2  # 2: rows name their word (a word with no tokens has no row)
WORD_POOLING = ("first", "mean")
SENTENCE_POOLING = ("cls", "mean")


@dataclass(frozen=True)
class FeatureOptions:
    level: str = "sentence"  # "word" (needs sentences with .words) or "sentence"
    word_pooling: str = "first"
    sentence_pooling: str = "cls"
    mask: str = ""  # head mask spec under which the features are taken
    ablation: Ablation = "zero"

    def __post_init__(self) -> None:
        if self.level not in ("word", "sentence"):
            raise InputError(f"unknown feature level {self.level!r}; use word or sentence")
        if self.word_pooling not in WORD_POOLING:
            raise InputError(f"unknown word pooling {self.word_pooling!r}; use one of: {', '.join(WORD_POOLING)}")
        if self.sentence_pooling not in SENTENCE_POOLING:
            raise InputError(f"unknown sentence pooling {self.sentence_pooling!r}; use one of: {', '.join(SENTENCE_POOLING)}")


@dataclass(frozen=True)
class Features:
    """`X` `[N, L+1, D]` float32: one row per word (or sentence) that fitted the model."""

    X: np.ndarray
    sentence_index: np.ndarray  # [N] which sentence the row comes from
    word_index: np.ndarray  # [N] which word of it (0 for sentence-level rows)
    truncated_words: int  # words lost because their sentence was cut to the model's maximum
    from_cache: bool = False


@dataclass(frozen=True)
class FeatureProgress:
    sentences: int
    total: int
    features: Features | None = None  # set on the last item


def default_cache_dir() -> Path:
    """`$BERTSCOPE_CACHE_DIR`, else `$XDG_CACHE_HOME/bertscope`, else `~/.cache/bertscope`."""
    if os.environ.get("BERTSCOPE_CACHE_DIR"):
        return Path(os.environ["BERTSCOPE_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "bertscope"


def data_hash(sentences: Sequence[Sentence], level: str) -> str:
    """What the features depend on in the data: the texts (and words, for word level)."""
    digest = hashlib.sha256()
    for sentence in sentences:
        words = sentence.words if level == "word" else None
        digest.update(json.dumps([sentence.text, sentence.pair, words]).encode())
    return digest.hexdigest()[:24]


def cache_key(fingerprint: str, sentences: Sequence[Sentence], options: FeatureOptions, max_length: int) -> str:
    payload = json.dumps(
        {"v": CACHE_VERSION, "model": fingerprint, "data": data_hash(sentences, options.level),
         "options": asdict(options), "max_length": max_length},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def extract_features(
    session,
    sentences: Sequence[Sentence],
    options: FeatureOptions,
    *,
    cache_dir: str | Path | None = None,
    batch_size: int = 32,
    cancel: threading.Event | None = None,
) -> Iterator[FeatureProgress]:
    """Yield progress per batch; the last item carries the Features (from the cache when it holds them).

    `cache_dir=None` uses the default cache; pass `False` to switch the cache off.
    """
    if not sentences:
        raise InputError("no sentences to take features from")
    if options.level == "word" and any(sentence.words is None for sentence in sentences):
        raise InputError("word-level features need sentences split into words (a CoNLL-U file)")
    path = None
    if cache_dir is not False:
        directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        key = cache_key(session.info.fingerprint, sentences, options, session.max_length)
        path = directory / f"features-{key}.npz"
        cached = _load(path, session)
        if cached is not None:
            yield FeatureProgress(len(sentences), len(sentences), cached)
            return
    gates = session.gate_tensor(session.mask(options.mask))
    order = sorted(range(len(sentences)), key=lambda index: len(sentences[index].text))
    rows: dict[int, np.ndarray] = {}  # sentence index -> its rows, assembled in input order at the end
    word_numbers: dict[int, list[int]] = {}  # sentence index -> the word of each of its rows
    lost = 0
    for start in range(0, len(order), batch_size):
        if cancel is not None and cancel.is_set():
            return
        indices = order[start : start + batch_size]
        batch = [sentences[index] for index in indices]
        inputs, word_ids, special = _tokenize(session, batch, options.level)
        with torch.inference_mode():
            outputs = session.run(inputs, gates=gates, ablation=options.ablation, attentions=False, hidden_states=True)
            if options.level == "sentence":
                pooled = _pool_sentences(outputs.hidden_states, inputs["attention_mask"], special, options.sentence_pooling)
                for row, vectors in zip(indices, pooled.float().cpu().numpy(), strict=True):
                    rows[row], word_numbers[row] = vectors[None], [0]
            else:
                pooled, present = _pool_words(outputs.hidden_states, word_ids, options.word_pooling)
                blocks = np.split(pooled.cpu().numpy(), np.cumsum([len(words) for words in present])[:-1])
                for index, block, words in zip(indices, blocks, present, strict=True):
                    rows[index], word_numbers[index] = block, words
                    lost += len(sentences[index].words) - (words[-1] + 1 if words else 0)
        yield FeatureProgress(min(start + batch_size, len(order)), len(order))
    ordered = [rows[index] for index in range(len(sentences))]
    features = Features(
        X=np.concatenate(ordered).astype(np.float32, copy=False),
        sentence_index=np.concatenate([np.full(len(r), index) for index, r in enumerate(ordered)]).astype(np.int64),
        word_index=np.concatenate([np.asarray(word_numbers[index], dtype=np.int64) for index in range(len(sentences))]),
        truncated_words=lost,
    )
    if path is not None:
        _save(path, features)
    yield FeatureProgress(len(sentences), len(sentences), features)


def _tokenize(session, batch: list[Sentence], level: str):
    tokenizer = session.tokenizer
    options = dict(padding=True, truncation=True, max_length=session.max_length, return_tensors="pt")
    if level == "word":
        encoded = tokenizer([list(sentence.words) for sentence in batch], is_split_into_words=True, **options)
        word_ids = [encoded.word_ids(row) for row in range(len(batch))]
    else:
        pairs = [sentence.pair for sentence in batch]
        if any(pair is not None for pair in pairs) and not all(pair is not None for pair in pairs):
            raise InputError("a batch mixes single sentences and pairs; give one kind of input per corpus")
        encoded = tokenizer([s.text for s in batch], pairs if pairs[0] is not None else None, return_special_tokens_mask=True, **options)
        word_ids = None
    special = encoded.pop("special_tokens_mask", None)
    inputs = {name: tensor.to(session.device) for name, tensor in encoded.items()}
    return inputs, word_ids, special


def _pool_sentences(hidden_states, attention_mask, special, pooling: str) -> torch.Tensor:
    """`[B, L+1, D]`: the first token's vectors, or the mean over real non-special tokens."""
    if pooling == "cls":
        return torch.stack([layer[:, 0] for layer in hidden_states], dim=1)
    keep = attention_mask.bool() & ~special.to(attention_mask.device).bool()
    weights = keep.float() / keep.float().sum(-1, keepdim=True).clamp(min=1)
    return torch.stack([torch.einsum("bt,btd->bd", weights, layer.float()) for layer in hidden_states], dim=1)


def _pool_words(hidden_states, word_ids: list[list[int | None]], pooling: str) -> tuple[torch.Tensor, list[list[int]]]:
    """`[W, L+1, D]` float32 for the words of the whole batch that have tokens, in order, pooled
    from their sub-words, and the indices of those words in each sentence.

    One gather per layer for the batch: no `[B, T, L+1, D]` stack of every token's states.
    A word cut off by truncation, or one the tokenizer turns into nothing, has no row.
    """
    batch, length, dim = hidden_states[0].shape
    positions, groups, present = [], [], []
    number = -1  # of the current word in the batch
    for row, ids in enumerate(word_ids):
        words: list[int] = []
        for position, word in enumerate(ids):
            if word is None:
                continue
            first_piece = not words or words[-1] != word
            if first_piece:
                words.append(word)
                number += 1
            if pooling == "mean" or first_piece:
                positions.append(row * length + position)
                groups.append(number)
        present.append(words)
    device = hidden_states[0].device
    total = sum(len(words) for words in present)
    positions = torch.tensor(positions, dtype=torch.long, device=device)
    pooled = torch.empty(total, len(hidden_states), dim, dtype=torch.float32, device=device)
    if pooling == "first":
        for layer, states in enumerate(hidden_states):
            pooled[:, layer] = states.reshape(batch * length, dim)[positions]
        return pooled, present
    # Mean: a word's pieces are consecutive among the gathered positions; average each run.
    pieces = torch.bincount(torch.tensor(groups, dtype=torch.long, device=device), minlength=total)
    for layer, states in enumerate(hidden_states):
        gathered = states.reshape(batch * length, dim)[positions].float()
        pooled[:, layer] = torch.segment_reduce(gathered, "mean", lengths=pieces, axis=0)
    return pooled, present


def _save(path: Path, features: Features) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as handle:
            np.savez(handle, X=features.X, sentence_index=features.sentence_index, word_index=features.word_index,
                     truncated_words=np.array(features.truncated_words))
    except (OSError, InputError):
        pass  # a cache that cannot be written only costs time next run


def _load(path: Path, session) -> Features | None:
    """The cached features, or None when the entry is missing or damaged (then it is recomputed)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            X = data["X"]
            features = Features(X=X, sentence_index=data["sentence_index"], word_index=data["word_index"],
                                truncated_words=int(data["truncated_words"]), from_cache=True)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
        return None
    if X.ndim != 3 or X.shape[1] != session.num_layers + 1 or X.shape[2] != session.hidden_size:
        return None
    if len(features.sentence_index) != len(X) or len(features.word_index) != len(X):
        return None
    return features
