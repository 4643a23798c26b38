"""Batches of length-sorted sentences, capped by tokens and, where attention maps are kept, by T².

Why a cap beyond a number of sentences: a forward pass holds `B × T × D` hidden states
(four times that in the feed-forward layer), and an eager pass with attention weights
`B × H × T²` floats per layer, several times over while softmax and the statistics run.
A fixed 32 sentences a batch lets the batch of a chunk's longest sentences cost many
times a typical one: 32 sentences of 229 tokens make 80 MB per layer of MiniLM's maps,
where 32 of 30 tokens make 1.4 MB. Peak memory then follows the longest sentences the
corpus happens to contain, and so grows with the corpus (issue 15: 764 MB at 1,000
sentences, 1,523 MB at 2,000, on real text). Capping `B·T` and `B·T²` bounds every pass
by the budget, whatever the corpus; a sentence longer than the budget allows still gets a
batch of its own.

Batches are filled up to the caps, not to a number of sentences (unless the caller gives
one): with at most 32 sentences a batch, the peak is the batch of a chunk's 32 longest
sentences, and a larger corpus has longer ones (EWT's first 1,000 sentences reach 79 tokens
there, its chunks of 16,000 up to 129), so the peak still grew with the corpus. Filled to
the caps, every corpus of a few thousand tokens reaches them, and the peak is the caps'.

Why 1,024 tokens: on a CPU smaller batches run faster per token, their tensors staying in
the caches (MiniLM, `patterns` over 1,500 EWT sentences, one thread: 10.8 s with batches of
4,096 tokens, 9.6 s with 2,048, 8.0 s with 1,024, 6.9 s with 512, and 8.4 s with the
earlier 32 sentences a batch). A GPU may prefer larger batches; not measured (no GPU was
lent to the sessions that wrote this).

The defaults let one sentence of 512 tokens (BERT's usual maximum) fit each cap, so for
such models the peak of a corpus job does not depend on its sentences at all.
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
