"""The corpus loop: a corpus as batches of encoded sentences, a chunk at a time, under one memory policy.

Every corpus analysis walks its corpus with `CorpusBatches`. Items (sentences, or a job's own:
numbered sentences, cloze queries) are read `chunk_size` at a time and encoded by the analysis,
a chunk in one call (a whole corpus's tokens would grow with it); each chunk's batches are
planned under the caps of data.batching (padded tokens, and B·T² where attention maps are
kept), shortest first, so a chunk's longest sentences cost no more than its shortest. The
chunks run on the corpus heap, and what one chunk's batches freed is handed back before the
next is encoded (model.allocator): memory stays flat in the corpus. The loop stops before
a batch once the cancel event is set. What an analysis writes is its own: how a chunk is
encoded, and what it does with a batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np
import torch

from bertscope.analyses.conditions import JobOptions
from bertscope.base import collector
from bertscope.data.batching import MAX_TOKENS, plan_batches
from bertscope.data.corpus import chunked
from bertscope.model.allocator import corpus_heap_over, release_freed_memory

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from bertscope.data.corpus import Sentence

CHUNK = 1024  # items read and encoded at a time
S = TypeVar("S")  # an item of the corpus
E = TypeVar("E")  # a chunk's encoding
T = TypeVar("T")


class Encoded(Protocol):
    input_ids: list[int]


def input_lengths(encoded: Mapping[str, Any]) -> list[int]:
    """Each item's token count in a tokenizer's output for a chunk (its `input_ids` rows, unpadded)."""
    return [len(ids) for ids in encoded["input_ids"]]


def pad_batch(tokenizer: PreTrainedTokenizerBase, encoded: Mapping[str, Any], indices: list[int]) -> dict[str, torch.Tensor]:
    """A batch's rows (`indices`) of a chunk's unpadded encoding as `[B, T]` int64 tensors, padded as `tokenizer.pad`
    pads them (the attention mask made where the encoding has none), each in one copy rather than a list a row."""
    lengths = [len(encoded["input_ids"][index]) for index in indices]
    pads = {"input_ids": tokenizer.pad_token_id or 0, "token_type_ids": tokenizer.pad_token_type_id, "special_tokens_mask": 1}
    columns = [
        (np.fromiter(itertools.chain.from_iterable(values[index] for index in indices), np.int64, sum(lengths)), pads.get(key, 0))
        for key, values in encoded.items()
    ]
    table, real = padded(lengths, columns, left=tokenizer.padding_side != "right")
    tensors = dict(zip(encoded, torch.from_numpy(table).unbind(), strict=True))
    if "attention_mask" not in tensors and "attention_mask" in tokenizer.model_input_names:
        tensors["attention_mask"] = torch.from_numpy(real.astype(np.int64))
    return tensors


def padded(lengths: Sequence[int], columns: Sequence[tuple[np.ndarray, int]], *, left: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A batch of items padded, every column at once: `[K, B, T]` int64, column k its items' values (`columns[k][0]`:
    all B items' end to end, item b `lengths[b]` long) with `columns[k][1]` where an item has none (after it, or before
    it with `left`); and the `[B, T]` mask of the items' own positions. One numpy copy a column, not a few calls an item."""
    counts = np.asarray(lengths)
    places, width = np.arange(counts.max()), counts.max()
    real = places >= width - counts[:, None] if left else places < counts[:, None]
    # row-major: `table[k][real] = values` fills item by item
    table = np.empty((len(columns), *real.shape), dtype=np.int64)
    for row, (values, fill) in zip(table, columns, strict=True):
        row[...] = fill
        row[real] = values
    return table, real


def joined_ids(rows: Iterable[Sequence[int | None]], missing: int = -1) -> np.ndarray:
    """Rows of ids that may be None (a batch's word or segment ids) end to end as int64, `missing` for None: one numpy
    conversion, not a Python step an id."""
    flat = np.array(list(itertools.chain.from_iterable(rows)), dtype=np.float64)  # None: NaN
    return np.where(np.isnan(flat), missing, flat).astype(np.int64)


def words_of(sentence: Sentence) -> tuple[str, ...]:
    """A sentence's words, in a word-level job whose corpus was found split into words (CoNLL-U)."""
    assert sentence.words is not None, "a word-level job checks that its sentences have words"
    return sentence.words


@dataclass(frozen=True)
class WordPieces:
    """The tokens of words in a batch's rows of word ids, in row order: each one's row, its position in the row, the
    number of its word in its sentence, and whether it is its word's first token (None in the word ids, a special
    token, has none; a word's tokens are contiguous)."""

    rows: np.ndarray
    positions: np.ndarray
    words: np.ndarray
    first: np.ndarray

    @classmethod
    def of(cls, word_ids: Sequence[Sequence[int | None]]) -> WordPieces:
        """Found for the batch at once (numpy over its word ids): a word-level job sees every token of its corpus."""
        sizes = [len(ids) for ids in word_ids]
        flat = joined_ids(word_ids)  # None: -1
        places = np.arange(len(flat))
        starts = np.repeat(np.cumsum(sizes) - sizes, sizes)  # each token's row's first place
        previous = np.concatenate([[-1], flat[:-1]])
        word = flat >= 0
        first = (flat != previous) | (places == starts)
        rows = np.repeat(np.arange(len(sizes)), sizes)
        return cls(rows[word], (places - starts)[word], flat[word], first[word])

    def starts(self) -> WordPieces:
        """Each word's first token only."""
        return WordPieces(self.rows[self.first], self.positions[self.first], self.words[self.first], self.first[self.first])

    def per_row(self, rows: int) -> list[slice]:
        """Where each of the batch's `rows` rows' tokens are."""
        bounds = np.searchsorted(self.rows, np.arange(rows + 1)).tolist()
        return [slice(start, stop) for start, stop in itertools.pairwise(bounds)]


def item_lengths(encoded: Sequence[Encoded]) -> list[int]:
    """Each item's token count in a chunk encoded as a list of items with `input_ids`."""
    return [len(item.input_ids) for item in encoded]


@dataclass(frozen=True, eq=False)
class CorpusBatch(Generic[S, E]):
    """One batch of a walk: its places in its chunk, with the chunk's items and their encoding."""

    chunk: list[S]
    encoded: E
    indices: list[int]  # into the chunk's encoding (and into `chunk`, where the encoding keeps its order)
    start: int  # the chunk's place in the walk: its first item's number
    number: int  # the batch's place in the walk, the same on every walk over the same items
    done: int  # items in this batch and the ones before it

    def __len__(self) -> int:
        return len(self.indices)

    def take(self, values: Sequence[T]) -> list[T]:
        """The batch's rows of `values` (the chunk, or its encoding's per-item lists)."""
        return [values[index] for index in self.indices]

    @property
    def items(self) -> list[S]:
        return self.take(self.chunk)

    @property
    def numbers(self) -> list[int]:
        """The batch's items' places in the walk."""
        return [self.start + index for index in self.indices]


class CorpusBatches(Generic[S, E]):
    """The batches of `items`, a chunk at a time: `for batch in CorpusBatches(...)` is a walk over the corpus.

    `encode(chunk)` encodes a chunk of items in one call and `lengths(encoding)` gives each
    item's token count (by default from a tokenizer's `input_ids`). A batch has at most
    `max_tokens` padded tokens, at most `max_square` for its size times the square of its
    longest length where that is given (passes that keep attention maps), and at most
    `job.batch_size` items where that is given. When `job.cancel` is set the walk stops before the
    next batch and `cancelled` says so. Walking again (a `Sequence` of items) gives the same
    batches.
    """

    def __init__(
        self,
        items: Iterable[S],
        encode: Callable[[list[S]], E],
        *,
        lengths: Callable[[Any], Sequence[int]] = input_lengths,
        job: JobOptions = JobOptions(),
        chunk_size: int | None = None,
        max_tokens: int = MAX_TOKENS,
        max_square: int | None = None,
    ) -> None:
        self.items, self.encode, self.lengths = items, encode, lengths
        self.batch_size, self.chunk_size = job.batch_size, chunk_size
        self.max_tokens, self.max_square = max_tokens, max_square
        self.cancel = job.cancel
        self.cancelled = False
        self.done = 0  # items in the batches walked so far
        self._count: int | None = None

    def chunks(self) -> Iterator[tuple[int, list[S], E]]:
        """(the chunk's place in the walk, the chunk, its encoding), chunk after chunk; what the last chunk's batches
        freed is handed back before the next is encoded."""
        start = 0
        for chunk in chunked(self.items, self.chunk_size or CHUNK):
            release_freed_memory()
            yield start, chunk, self.encode(chunk)
            start += len(chunk)

    def plan(self, encoded: E) -> Iterator[list[int]]:
        """A chunk's batches: indices into its encoding, shortest first."""
        return plan_batches(self.lengths(encoded), self.batch_size, max_tokens=self.max_tokens, max_square=self.max_square)

    def __iter__(self) -> Iterator[CorpusBatch[S, E]]:
        self.cancelled, self.done = False, 0
        number = 0
        with collector.paused():  # a job makes no garbage that needs a collection to free (base.collector)
            for start, chunk, encoded in corpus_heap_over(self.chunks()):  # one heap setting for batches of every shape
                for indices in self.plan(encoded):
                    if self.cancel is not None and self.cancel.is_set():
                        self.cancelled = True
                        return
                    self.done += len(indices)
                    yield CorpusBatch(chunk, encoded, indices, start, number, self.done)
                    number += 1
        self._count = number

    def count(self) -> int:
        """Batches in a walk: counted by the last whole walk, or by encoding and planning every chunk (no pass)."""
        if self._count is None:
            self._count = sum(sum(1 for _ in self.plan(encoded)) for _, _, encoded in self.chunks())
        return self._count
