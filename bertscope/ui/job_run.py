"""One cancellable long job of a screen or widget: a core generator of Progress, run in a thread worker.

Every corpus screen (and the attribution row, and head importance) needs the same machinery:
start the job in an exclusive thread worker, stop the one before it, bring each Progress to
the UI thread (a backlog collapses to the newest step, so a slow repaint never queues up
stale ones), drop what a cancelled or replaced run still sends, and show a failure as a
notification, never a traceback; the notes that come with the outcome are shown as
notifications too. `JobRun` is that machinery once. It is a plain object
held by its owner (the widget whose workers run the job, and which ends them when it is
removed); steps reach the owner's callbacks through `call_later`, so the owner needs no
message handler of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from textual.dom import DOMNode
from textual.worker import get_current_worker

from bertscope.base.errors import BertscopeError
from bertscope.base.progress import Progress

Job = Callable[[threading.Event], Iterable[Progress]]  # given the run's cancel event, the steps of the run


class JobRun:
    """Runs one job at a time for `owner`; `on_step` receives each Progress of the newest run, on the UI thread."""

    def __init__(
        self,
        owner: DOMNode,
        on_step: Callable[[Progress], None],
        *,
        name: str,
        on_failed: Callable[[str], None] | None = None,
        title: str = "",
    ) -> None:
        """`name`: the owner's worker group; `on_failed(reason)` after the notification (titled `title`) lets the owner say it stopped."""
        self._owner, self._on_step, self._on_failed = owner, on_step, on_failed
        self.name, self.title = name, title
        self._run = 0  # the newest run; what older ones send is dropped
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._latest: tuple[int, Progress] | None = None  # the newest step not yet shown
        self.running = False

    def start(self, job: Job) -> None:
        """Stop the run under way, if any, and start `job` in a thread worker."""
        self._cancel.set()  # the old run stops at its next step
        self._cancel = cancel = threading.Event()
        self._run += 1
        self.running = True
        run = self._run
        self._owner.run_worker(
            lambda: self._drain(job, run, cancel), name=self.name, group=self.name, thread=True, exclusive=True, exit_on_error=False
        )

    def cancel(self) -> bool:
        """Stop the run under way and drop whatever it still sends; True when one was running."""
        was_running = self.running
        self._cancel.set()
        self._run += 1
        self.running = False
        self._owner.workers.cancel_group(self._owner, self.name)
        return was_running

    # in the worker thread

    def _drain(self, job: Job, run: int, cancel: threading.Event) -> None:
        worker = get_current_worker()
        progress = None
        try:
            for progress in job(cancel):
                if cancel.is_set() or worker.is_cancelled:
                    return
                self._send(run, progress)
        except BertscopeError as error:
            self._owner.call_later(self._failed, run, str(error))
            return
        except Exception as error:  # a bug must not take the explorer down: say what it was
            self._owner.call_later(self._failed, run, f"{type(error).__name__}: {error}")
            return
        if not cancel.is_set() and (progress is None or not progress.finished):
            self._owner.call_later(self._failed, run, "the run stopped before it finished")

    def _send(self, run: int, progress: Progress) -> None:
        """Leave the step for the UI thread; only the first of a backlog schedules a delivery."""
        with self._lock:
            waiting = self._latest is not None
            self._latest = (run, progress)
        if not waiting and not self._owner.call_later(self._deliver):
            with self._lock:
                self._latest = None  # the owner is gone: nobody will deliver

    # on the UI thread

    def _deliver(self) -> None:
        with self._lock:
            latest, self._latest = self._latest, None
        if latest is None or latest[0] != self._run:
            return
        progress = latest[1]
        if progress.finished:
            self.running = False
            for note in progress.notes:
                self._owner.app.notify(note, title=self.title, timeout=8)
        self._on_step(progress)

    def _failed(self, run: int, reason: str) -> None:
        if run != self._run:
            return
        self.running = False
        self._owner.app.notify(reason, title=self.title, severity="error", timeout=10)
        if self._on_failed is not None:
            self._on_failed(reason)
