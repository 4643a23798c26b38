"""Python's cycle collector paused while a process starts: imports, then loading the model.

Importing torch and transformers makes some 400,000 objects that live as long as the process,
and every full collection during the imports walks all of those made so far: several tenths of
a second of a start, more on a slow or busy machine (benchmarks/README.md, startup.py). Imports
make almost no cyclic garbage, so the command line and the explorer, which own their process,
pause the collector until the model is loaded. A library user's process is left as it is.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


def pause() -> bool:
    """Stop cycle collection; returns whether it was running (give it to `resume`)."""
    running = gc.isenabled()
    gc.disable()
    return running


def resume(running: bool) -> None:
    """Collect cycles again if they were collected before `pause`."""
    if running:
        gc.enable()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cycle collection within the block (and as before after it, whatever happens in it)."""
    running = pause()
    try:
        yield
    finally:
        resume(running)
