"""The one job loop of a screen that runs an analysis (`RunScreen`), and its corpus form (`CorpusRunScreen`).

A `RunScreen` runs its job on a `JobRun` (a thread worker, the newest run winning, a failure a notification) and
shares the rest of the loop: the progress bar and the line beside it, a partial result drawn as it streams, the
finished run kept on the app and shown again when the screen comes back, escape to cancel (then to leave). Probing,
patching and the pruning curve are built on it; a `CorpusRunScreen` adds a corpus field (the corpus handed whole to
the API's analysis, its notes on the result) and `e` to save the screen with the result's numbers: the overview,
geometry and comparison screens."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from threading import Event
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from rich.text import Text
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Static

from bertscope.analyses.conditions import Conditions, LiveEdits
from bertscope.api import Corpus, built_in_treebank, corpus
from bertscope.base.progress import Progress
from bertscope.data.corpus import sample_corpus
from bertscope.ui.export import json_text, save_screen
from bertscope.ui.focus import leave_input
from bertscope.ui.job_run import Job, JobRun
from bertscope.ui.kept import KeptResults, KeptRun
from bertscope.ui.widgets.job_progress import JobProgress

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SAMPLE = "sample corpus"  # what a corpus field shows for the sample shipped with bertscope, not its installed path
R = TypeVar("R")  # the result of a screen's analysis
D = TypeVar("D")  # what the screen gives back when it is dismissed
Analyse = Callable[[Corpus, Event], Iterable[Progress]]  # the corpus (its sentences read as they are taken), the cancel event


def corpus_path(typed: str) -> str:
    """The file a corpus field names: what was typed, or the shipped sample's path for `sample corpus` (unless a file of
    that name is there)."""
    return str(sample_corpus()) if typed == SAMPLE and not Path(typed).exists() else typed


class RunScreen(Screen[D], Generic[R, D]):
    """A screen's one job loop: `start_run(describe, job)`, then each step on the bar and the line beside it
    (`status`), the result kept on the app under `name_kept` (`kept_run`), escape to cancel, then back.

    The lines are the screen's own (`step_text`, `done_text`, `cancelled_text`); `finished(result)` is what the
    screen does with a result beyond drawing it (`draw`), `stopped()` what it does when a run ends without one.
    """

    name_kept = ""
    status = ".progress-text"  # the line that says how the run goes
    job_title = ""  # the title of its failure's notification

    def __init__(self, kept: KeptResults | None = None) -> None:
        super().__init__()
        self.kept = kept if kept is not None else KeptResults()
        self.result: R | None = None
        self.job = JobRun(self, self.stepped, name=self.name_kept or "run", on_failed=self.failed, title=self.job_title)

    @property
    def running(self) -> bool:
        return self.job.running

    def say(self, line: str | Text) -> None:
        """The line beside the progress bar."""
        self.query_one(self.status, Static).update(line)

    def _bar(self) -> JobProgress | None:
        try:
            return self.query_one(JobProgress)
        except NoMatches:  # a screen whose line alone says how it goes
            return None

    def start_run(self, describe: str, job: Job) -> None:
        """Say `describe` and run `job` (given the run's cancel event, its steps), stopping the run under way."""
        self.say(describe)
        if (bar := self._bar()) is not None:
            bar.started()
        self.job.start(job)

    def stepped(self, progress: Progress) -> None:
        bar = self._bar()
        if not progress.finished:
            if progress.partial is not None:  # what the run has found so far
                self.result = progress.partial
            self.say(self.step_text(progress))
            if bar is not None:
                bar.stepped(progress.done, progress.total)
            if progress.partial is not None:
                self.draw()
            return
        self.result = result = cast(R, progress.result)  # the last step carries the screen's result
        kept = self.kept_run(result)
        if kept is not None:
            self.kept.runs[self.name_kept] = kept
        if bar is not None:
            bar.finished()
        self.say(self.done_text())  # the result's notes (what reading the corpus skipped) come with the step (JobRun)
        self.finished(result)
        self.draw()

    def kept_run(self, result: R) -> KeptRun | None:
        """The finished run as the app keeps it (None: kept otherwise)."""
        return None

    def finished(self, result: R) -> None:
        """What the screen does with a finished result beyond drawing it."""

    def failed(self, reason: str) -> None:
        if (bar := self._bar()) is not None:
            bar.stopped()
        self.say("stopped: " + reason)
        self.stopped()

    def stopped(self) -> None:
        """What the screen does when a run ends without its result (failed or cancelled)."""

    def keep_view(self) -> dict[str, Any]:
        """What of the screen's view to keep with the result (overridden)."""
        return {}

    def on_screen_suspend(self) -> None:
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None and kept.result is self.result:
            self.kept.runs[self.name_kept] = dataclasses.replace(kept, view=self.keep_view())

    def on_unmount(self) -> None:
        self.on_screen_suspend()

    def on_resize(self) -> None:
        self.draw()  # a screen's lines and charts fit its width

    def cancel_run(self) -> bool:
        """Stop the run under way; True when one was running."""
        if (bar := self._bar()) is not None:
            bar.stopped()
        return self.job.cancel()

    def action_back(self) -> None:
        if leave_input(self):
            return
        if self.cancel_run():
            self.say(self.cancelled_text())
            self.stopped()
            return
        self.dismiss(None)

    def step_text(self, progress: Progress) -> str:
        total = f" of {progress.total:,}" if progress.total else ""
        return f"{progress.stage}: {progress.done:,}{total} · escape cancels"

    def done_text(self) -> str | Text:
        raise NotImplementedError

    def cancelled_text(self) -> str:
        return "cancelled (r runs again)"

    def draw(self) -> None:
        raise NotImplementedError


class CorpusRunScreen(RunScreen[R, tuple[int, int] | None]):
    """What the corpus screens share: a corpus field, a worker with progress, escape to cancel, then back.

    A finished run is kept on the app under `name_kept` (ui.kept) and shown again when the screen
    comes back; `e` saves the screen and `export_data()`. An analysis whose result fills in as the
    corpus streams (`Progress.partial`) is drawn at every step. The lines under the bar are the
    screen's own (`step_text`, `done_text`, `kept_text`, `cancelled_text`).
    """

    treebank_sentences = 500  # the corpus when none is given: the generated treebank, words coloured by UPOS

    def __init__(self, kept: KeptResults | None = None) -> None:
        super().__init__(kept)
        self._run_on: tuple[str, Conditions | None] = ("", None)  # (data, conditions) of the run under way

    def restore(self) -> KeptRun | None:
        """Show the kept run, if there is one, and return it."""
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None:
            self.result = cast(R, kept.result)  # kept under this screen's name: its own result type
            self.query_one(JobProgress).finished()
            self.say(self.kept_text(kept))
            self.call_after_refresh(self.draw)
        return kept

    def result_conditions(self) -> tuple[str, str, LiveEdits | None]:
        """What the passes of the result shown ran under, as (mask spec, ablation, erased property and switched SAE
        features): the kept run's, or
        the one under way's; ("", "", None) for the model as it is."""
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None and kept.result is self.result:
            return kept.mask, kept.ablation, kept.erasure
        conditions = self._run_on[1]
        if conditions is None:
            return "", "", None
        return conditions.mask.spec(), conditions.ablation, conditions.live

    def result_erasure(self) -> LiveEdits | None:
        """The property erased and the SAE features switched in the passes of the result shown."""
        return self.result_conditions()[2]

    def run_on_corpus(
        self,
        describe: str,
        path: str,
        analyse: Analyse,
        data: str = "",
        conditions: Conditions | None = None,
    ) -> None:
        """Choose the corpus at `path` (empty: the built-in treebank; `sample corpus`: the shipped sample), then run
        `analyse(corpus, cancel)` on it.

        The corpus travels whole to the API's analysis, which reads its sentences as it takes them and puts what
        reading skipped on the result's notes (shown by `JobRun`). `data` and `conditions` (the explorer's mask,
        ablation and erasure) say what the run is on, to keep with its result.
        """
        self._run_on = (data, conditions)

        def job(cancel: Event) -> Iterable[Progress]:
            chosen = corpus(data=corpus_path(path)) if path else built_in_treebank(self.treebank_sentences)
            return analyse(chosen, cancel)

        self.start_run(describe, job)

    def kept_run(self, result: R) -> KeptRun | None:
        data, conditions = self._run_on
        return KeptRun.of(data, conditions, result, self.keep_view())

    def action_export(self) -> None:
        save_screen(self.app, self.name_kept, None if self.result is None else json_text(self.export_data()), ".json", self.figure)

    def export_data(self) -> dict[str, Any]:
        raise NotImplementedError

    def figure(self) -> Figure:
        """The figure `e` writes of what the screen shows (bertscope.figures)."""
        raise NotImplementedError

    def kept_text(self, kept: KeptRun) -> str:
        return f"{self.done_text()} · kept from before (r runs again)"
