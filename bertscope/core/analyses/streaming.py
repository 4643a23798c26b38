"""A corpus as batches of encoded sentences, a chunk at a time: how the attention jobs stream.

Sentences are read `chunk_size` at a time and encoded by the job (which sorts them by
length, so batches carry little padding); each chunk's batches are planned under the token
and B·T² caps of core.data.batching, so a chunk's longest sentences cost no more than its
shortest. The chunks run on the corpus heap, and what one chunk freed is handed back before
the next is encoded (core.model.allocator): memory stays flat in the corpus.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

from bertscope.core.data.batching import MAX_SQUARE, MAX_TOKENS, plan_batches
from bertscope.core.data.corpus import Sentence, chunked
from bertscope.core.model.allocator import corpus_heap_over, release_freed_memory


class Encoded(Protocol):
    input_ids: list[int]


E = TypeVar("E", bound=Encoded)


def encoded_batches(
    sentences: Iterable[Sentence],
    encode: Callable[[list[Sentence]], list[E]],
    batch_size: int | None,
    *,
    chunk_size: int = 1024,
    max_tokens: int = MAX_TOKENS,
    max_square: int | None = MAX_SQUARE,
) -> Iterator[list[E]]:
    """Batches of `encode(chunk)`'s items (sorted by length within the chunk), chunk after chunk."""
    for chunk in corpus_heap_over(chunked(sentences, chunk_size)):  # one heap setting for batches of every shape
        release_freed_memory()  # what the last chunk's batches freed
        encoded = encode(chunk)
        del chunk
        lengths = [len(item.input_ids) for item in encoded]
        for indices in plan_batches(lengths, batch_size, max_tokens=max_tokens, max_square=max_square):
            yield [encoded[index] for index in indices]
