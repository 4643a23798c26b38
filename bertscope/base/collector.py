"""Python's cycle collector paused while a process starts and while a corpus job runs.

Importing torch and transformers makes some 400,000 objects that live as long as the process,
and every full collection walks all of them: about 0.2 s each on this project's machines,
several during the imports (the explorer's first heatmap came a second later, median of 8 runs:
benchmarks/README.md, startup.py) and about one per 2,000 sentences of a corpus job (a fifth of
`patterns` on a small model). Neither makes garbage that only a collection would free (a corpus
job over 2,000 EWT sentences left 18-67 objects in cycles), so collection is paused:

- while the command line and the explorer, which own their process, import and load the model;
- while a corpus job streams its batches (analyses.streaming), in any process: the pause
  ends with the job, however it ends.

Pauses from several threads (a job in the explorer's worker beside its start) are counted: the
collector runs again when the last one ends, if it ran before the first.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_holders = 0
_was_running = False


class Pause:
    """A pause of cycle collection, from now until `end()` (which may be called more than once, from any thread)."""

    def __init__(self) -> None:
        global _holders, _was_running
        self._ended = False
        with _lock:
            if _holders == 0:
                _was_running = gc.isenabled()
                gc.disable()
            _holders += 1

    def end(self) -> None:
        global _holders
        with _lock:
            if self._ended:
                return
            self._ended = True
            _holders -= 1
            if _holders == 0 and _was_running:
                gc.enable()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cycle collection within the block (and as before after it, whatever happens in it)."""
    pause = Pause()
    try:
        yield
    finally:
        pause.end()
