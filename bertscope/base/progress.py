"""One record for the progress of every long job in the core, and the one way to drain it.

Corpus analyses are generators: they yield a `Progress` after each batch or stage so that
the CLI can draw a bar and the explorer a live screen, and they stop early when their
cancel event is set. The last item carries the job's outcome in `result`; a job whose
answer fills in as the corpus streams (pattern statistics) also shows what it knows so
far in `partial`. Torch-free, so that the UI can name it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from bertscope.base.errors import BertscopeError, Cancelled

T = TypeVar("T")


@dataclass(frozen=True)
class Progress(Generic[T]):
    """How far a job is (`done` of `total`, None while a corpus streams); its outcome on the last item."""

    stage: str
    done: int
    total: int | None = None
    result: T | None = None  # set on the last item only
    partial: Any = None  # what is known so far, where the job can say (e.g. the statistics so far)
    notes: tuple[str, ...] = ()  # on the last item: what a person should be told about the outcome (lines skipped, text cut)

    @property
    def finished(self) -> bool:
        return self.result is not None


def relay(
    steps: Iterable[Progress[T]], relabel: Callable[[Progress[T]], Progress[Any]] | None = None
) -> Generator[Progress[Any], None, T | None]:
    """Run a sub-job inside a job: `result = yield from relay(steps)`.

    Yields the sub-job's steps (through `relabel`, to say them in the outer job's terms) and
    returns its result, or None when it ended without one (it was cancelled).
    """
    for step in steps:
        if step.result is not None:
            return step.result
        yield relabel(step) if relabel is not None else step
    return None


class Unfinished(BertscopeError):
    """A job ended without its outcome: it was cancelled, or its generator stopped early."""


def outcome(
    steps: Iterable[Progress[T]],
    what: str = "the job",
    *,
    on_step: Callable[[Progress[T]], None] | None = None,
    cancel: threading.Event | None = None,
) -> T:
    """Drain `steps` (calling `on_step` with each) and return the last item's result.

    Stops at the first item after `cancel` is set and raises `Cancelled`; raises
    `Unfinished`, naming `what`, when the steps end without a result.
    """
    last = None
    for last in steps:
        if on_step is not None:
            on_step(last)
        if cancel is not None and cancel.is_set():
            break
    if cancel is not None and cancel.is_set():
        raise Cancelled(f"{what} was cancelled before it finished")
    if last is None or last.result is None:
        raise Unfinished(f"{what} stopped before it finished")
    return last.result
