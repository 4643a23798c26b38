"""Batches of length-sorted sentences, capped by padded tokens and, where attention maps are kept, by T².

A pass holds `B × T × D` hidden states, and an eager pass with attention weights
`B × H × T²` floats per layer. A fixed number of sentences a batch would let the batch of a
corpus' longest sentences cost many times a typical one, so that peak memory followed the
longest sentences the corpus happens to contain, and grew with the corpus. Capping `B·T`
and `B·T²` bounds every pass, whatever the corpus; a sentence longer than a cap still gets
a batch of its own. Batches are filled up to the caps, so every corpus of a few thousand
tokens reaches them and the peak is the caps'. The defaults let one sentence of 512 tokens
fit each cap. The measurements behind these numbers are in benchmarks/README.md
("Measurements behind the code's settings").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

MAX_TOKENS = 1024  # padded tokens per batch: B·T (on a CPU also the fastest of 512-4,096: see below)
MAX_SQUARE = 32 * 96 * 96  # B·T² per batch where attention maps are kept (≥ 512²)


def plan_batches(
    lengths: Sequence[int],
    batch_size: int | None = None,
    *,
    max_tokens: int = MAX_TOKENS,
    max_square: int | None = None,
) -> Iterator[list[int]]:
    """Indices into `lengths`, grouped into batches of similar length, shortest first.

    A batch has at most `max_tokens` padded tokens (its size times its longest length),
    when `max_square` is given (passes that keep attention maps) at most `max_square` for
    its size times the square of its longest length, and at most `batch_size` sentences
    when that is given. A sentence that alone exceeds a cap is a batch of one.
    """
    if batch_size is None:
        batch_size = len(lengths) or 1
    if batch_size < 1:
        raise ValueError(f"batch_size must be 1 or more, not {batch_size}")
    order = sorted(range(len(lengths)), key=lambda index: lengths[index])
    batch: list[int] = []
    for index in order:
        longest = max(int(lengths[index]), 1)  # sorted: the newcomer is the longest
        size = len(batch) + 1
        fits = size <= batch_size and size * longest <= max_tokens
        if max_square is not None:
            fits = fits and size * longest * longest <= max_square
        if batch and not fits:
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch
