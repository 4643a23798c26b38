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
# ... while probes are fitted: an evaluation allocates the same few blocks again and again (its logits), which the
# heap reuses without holes; mapped, each would be page-faulted in anew.
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

    Corpus jobs call it between chunks: with the thresholds above glibc keeps freed memory at
    the top of each heap, and batches of ever different shapes leave freed holes inside it.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


@contextlib.contextmanager
def corpus_heap(mmap_threshold: int = STREAMING_THRESHOLD) -> Iterator[None]:
    """While a corpus job runs, serve blocks of `mmap_threshold` (256 KB) and more with mmap.

    A corpus job's batches all differ in shape, and the heap that `keep_freed_memory` lets
    them share fragments: freed blocks of one batch rarely fit the next one's, so the heap
    would grow chunk after chunk. Mapped blocks are handed back when freed instead, at the
    cost of some page faults; interactive passes keep the 32 MB threshold, which comes back
    when the last corpus job ends. A no-op where `keep_freed_memory` did not tune glibc (not
    glibc, or the user's own MALLOC_ settings).
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


@contextlib.contextmanager
def fitting_heap() -> Iterator[None]:
    """While probes are fitted on features a corpus job took: what its passes freed handed back first, then
    blocks of FITTING_THRESHOLD and more mapped (`corpus_heap`).

    A fit streams blocks of rows and their sums through memory; kept on the heap, each block
    would leave freed holes and the heap would grow with the number of blocks. An
    evaluation's smaller temporaries, the same few sizes every time, stay on the heap.
    """
    release_freed_memory()
    with corpus_heap(FITTING_THRESHOLD):
        yield


def _mallopt(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(option, value)
