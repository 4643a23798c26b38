"""A long job's progress bar that moves only while its job runs.

Textual's ProgressBar animates whenever its total is unknown (None): made that way, a
screen's bar pulsed before anything ran and went on pulsing after a run was cancelled
before its first step. This one stands still unless a job runs: empty before a run, full
when one finished, where it stopped after a cancel or a failure; it pulses only from a run's
start to its first step that says how far it has got, or for a job whose total is unknown.
"""

from __future__ import annotations

from textual.widgets import ProgressBar


class JobProgress(ProgressBar):
    """The bar of one screen's job: `started`, `stepped`, `finished`, `stopped` as the job goes."""

    def __init__(self, *, show_percentage: bool = False, id: str | None = None) -> None:
        super().__init__(total=1, show_eta=False, show_percentage=show_percentage, id=id)  # empty: nothing ran yet

    @property
    def moving(self) -> bool:
        """Whether the bar animates (a job runs and has not said how far it has got)."""
        return self.total is None

    def started(self) -> None:
        """A job starts: the bar pulses until its first step."""
        self.update(total=None, progress=0)

    def stepped(self, done: int, total: int | None) -> None:
        """A step of the job: `done` of `total` (None or 0: a total not known, the bar pulses while the job runs)."""
        self.update(total=total or None, progress=done)

    def finished(self) -> None:
        self.update(total=1, progress=1)

    def stopped(self) -> None:
        """The job was cancelled or failed: the bar stands where it was, empty if it had not got anywhere."""
        if self.total is None:
            self.update(total=1, progress=0)
