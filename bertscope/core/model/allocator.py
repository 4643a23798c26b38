"""Keeping freed memory in the process between forward passes (glibc only).

An attention tensor of a long input is tens of MB. glibc serves such blocks with mmap and
hands them back to the kernel when freed, so every forward pass page-faults them in
again: about 7 ms of a 256-token pass on a 2-core machine, measured in
benchmarks/forward_latency.py. Raising the mmap and trim thresholds keeps that memory in
the process for the next pass; peak memory does not grow.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
KEPT_THRESHOLD = 32 << 20  # blocks below this come from the heap and are kept when freed
STREAMING_THRESHOLD = 256 << 10  # ... during corpus jobs (see `corpus_heap`)
# ... while probes are fitted: an evaluation allocates the same few blocks again and again (its logits, classes ×
# up to FIT_BLOCK rows: 2.2 MB for a task and its control of 17 classes), which the heap reuses without holes;
# mapped, each was page-faulted in anew (EWT UPOS, `probe` warm with its baselines: 11.1 s against 9.7 s).
FITTING_THRESHOLD = 8 << 20
_tuned = False
_kept = KEPT_THRESHOLD  # the threshold keep_freed_memory set
_streaming = 0  # corpus jobs running now (nested or in several threads)
_streaming_lock = threading.Lock()
T = TypeVar("T")


def keep_freed_memory(mmap_threshold: int = KEPT_THRESHOLD, trim_threshold: int = 256 << 20) -> bool:
    """Tune glibc's malloc once per process; a no-op elsewhere or if the user set it already."""
    global _tuned, _kept
    if _tuned or not sys.platform.startswith("linux"):
        return _tuned
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, for one, has no mallopt)
        return False
    _tuned = bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
    _kept = mmap_threshold
    return _tuned


def release_freed_memory() -> None:
    """Give memory freed so far back to the system (glibc's malloc_trim; a no-op elsewhere).

    Corpus jobs call it between chunks. With the thresholds above glibc keeps up to 256 MB
    freed at the top of each heap, and batches of ever different shapes leave freed holes
    inside it. On 4,000 sentences of real text (patterns, MiniLM) malloc's freed-but-kept
    bytes rose 178 -> 211 MB; trimming once per 1,024 sentences took the peak RSS at 4,000
    sentences from 789 to 773 MB (712 MB at 1,024). A small part of the drift: most of
    what remains is memory in use, not freed memory (see benchmarks/README.md, issue 15).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


@contextlib.contextmanager
def corpus_heap(mmap_threshold: int = STREAMING_THRESHOLD):
    """While a corpus job runs, serve blocks of `mmap_threshold` (256 KB) and more with mmap.

    A corpus job's batches all differ in shape, and the heap that `keep_freed_memory` lets
    them share fragments: freed blocks of one batch rarely fit the next one's, so the heap
    grows chunk after chunk. `importance` (gradients, MiniLM, varied text) peaked at 795,
    863 and 886 MB in its first three chunks, its heap 627 -> 738 MB for 151 MB in use at
    the chunk boundaries; with blocks of 1 MB and more mapped (and unmapped when freed) the
    three peaks were 660, 664 and 659 MB (4 MB still grew: 764 -> 861 MB). With batches of
    1,024 tokens, blocks of 256 KB to 1 MB were the ones left as holes: at 1 MB the same job
    over 16,000 EWT sentences kept 90 MB freed in the heap and peaked at 471 MB of anonymous
    memory, at 512 KB 30 MB and 430 MB, at 256 KB 17 MB and 419 MB. Page faults on
    the mapped blocks cost some time; interactive passes keep the 32 MB threshold, which
    comes back when the last corpus job ends. A no-op where `keep_freed_memory` did not tune
    glibc (not glibc, or the user's own MALLOC_ settings).
    """
    global _streaming
    with _streaming_lock:
        _streaming += 1
        if _streaming == 1 and _tuned:
            _mallopt(M_MMAP_THRESHOLD, mmap_threshold)
    try:
        yield
    finally:
        with _streaming_lock:
            _streaming -= 1
            if _streaming == 0 and _tuned:
                _mallopt(M_MMAP_THRESHOLD, _kept)


def corpus_heap_over(items: Iterable[T]) -> Iterator[T]:
    """`items` (a corpus job's chunks or batches), iterated with `corpus_heap` on until they run out or are dropped."""
    with corpus_heap():
        yield from items


def _mallopt(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(option, value)
