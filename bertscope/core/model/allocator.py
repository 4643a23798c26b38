"""Keeping freed memory in the process between forward passes (glibc only).

An attention tensor of a long input is tens of MB. glibc serves such blocks with mmap and
hands them back to the kernel when freed, so every forward pass page-faults them in
again: about 7 ms of a 256-token pass on a 2-core machine, measured in
benchmarks/forward_latency.py. Raising the mmap and trim thresholds keeps that memory in
the process for the next pass; peak memory does not grow.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
_tuned = False


def keep_freed_memory(mmap_threshold: int = 32 << 20, trim_threshold: int = 256 << 20) -> bool:
    """Tune glibc's malloc once per process; a no-op elsewhere or if the user set it already."""
    global _tuned
    if _tuned or not sys.platform.startswith("linux"):
        return _tuned
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, for one, has no mallopt)
        return False
    _tuned = bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
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
