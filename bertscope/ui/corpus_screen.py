"""The shared shape of a screen that runs one analysis over a corpus: a corpus field, a worker with a progress bar,
escape to cancel (then to leave), the finished run kept on the app and shown again when the screen comes back, and `e`
to save the screen with the result's numbers. The overview, geometry and comparison screens are built on it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from threading import Event
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from textual.screen import Screen
from textual.widgets import Static

from bertscope.api import built_in_treebank, corpus
from bertscope.core.analyses.erasure_results import LiveErasure
from bertscope.core.data.corpus import ReadReport, Sentence, sample_corpus
from bertscope.core.progress import Progress
from bertscope.ui.conditions import Conditions
from bertscope.ui.export import json_text, save_screen
from bertscope.ui.focus import leave_input
from bertscope.ui.job_run import JobRun
from bertscope.ui.kept import KeptResults, KeptRun
from bertscope.ui.widgets.job_progress import JobProgress

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SAMPLE = "sample corpus"  # what a corpus field shows for the sample shipped with bertscope, not its installed path
R = TypeVar("R")  # the result of a screen's analysis
Analyse = Callable[[Iterable[Sentence], Event], Iterable[Progress]]  # the sentences as they are read, the cancel event


def corpus_path(typed: str) -> str:
    """The file a corpus field names: what was typed, or the shipped sample's path for `sample corpus` (unless a file of
    that name is there)."""
    return str(sample_corpus()) if typed == SAMPLE and not Path(typed).exists() else typed


class CorpusRunScreen(Screen[tuple[int, int] | None], Generic[R]):
    """What the corpus screens share: a corpus field, a worker with progress, escape to cancel, then back.

    A finished run is kept on the app under `name_kept` (ui.kept) and shown again when the screen
    comes back; `e` saves the screen and `export_data()`. An analysis whose result fills in as the
    corpus streams (`Progress.partial`) is drawn at every step. The lines under the bar are the
    screen's own (`step_text`, `done_text`, `kept_text`, `cancelled_text`).
    """

    name_kept = ""
    treebank_sentences = 500  # the corpus when none is given: the generated treebank, words coloured by UPOS

    def __init__(self, kept: KeptResults | None = None) -> None:
        super().__init__()
        self.kept = kept if kept is not None else KeptResults()
        self.result: R | None = None
        self.job = JobRun(self, self.stepped, name="corpus-run", on_failed=self.failed)
        self._run_on: tuple[str, Conditions | None] = ("", None)  # (data, conditions) of the run under way
        self._read = ReadReport()  # what reading its corpus skipped

    @property
    def running(self) -> bool:
        return self.job.running

    def say(self, line: str) -> None:
        """The line beside the progress bar."""
        self.query_one(".progress-text", Static).update(line)

    def restore(self) -> KeptRun | None:
        """Show the kept run, if there is one, and return it."""
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None:
            self.result = cast(R, kept.result)  # kept under this screen's name: its own result type
            self.query_one(JobProgress).finished()
            self.say(self.kept_text(kept))
            self.call_after_refresh(self.draw)
        return kept

    def result_conditions(self) -> tuple[str, str, LiveErasure | None]:
        """What the passes of the result shown ran under, as (mask spec, ablation, erased property): the kept run's, or
        the one under way's; ("", "", None) for the model as it is."""
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None and kept.result is self.result:
            return kept.mask, kept.ablation, kept.erasure
        conditions = self._run_on[1]
        if conditions is None:
            return "", "", None
        return conditions.mask.spec(), conditions.ablation, conditions.erasure

    def result_erasure(self) -> LiveErasure | None:
        """The property erased in the passes of the result shown."""
        return self.result_conditions()[2]

    def keep_view(self) -> dict[str, Any]:
        """What of the screen's view to keep with the result (overridden)."""
        return {}

    def run_on_corpus(
        self,
        describe: str,
        path: str,
        analyse: Analyse,
        data: str = "",
        conditions: Conditions | None = None,
    ) -> None:
        """Read the corpus at `path` (empty: the built-in treebank; `sample corpus`: the shipped sample), then run
        `analyse(sentences, cancel)` on it.

        The sentences are read as the analysis takes them. `data` and `conditions` (the explorer's mask, ablation
        and erasure) say what the run is on, to keep with its result.
        """
        self._run_on = (data, conditions)
        self._read = ReadReport()
        self.say(describe)
        self.query_one(JobProgress).started()

        def job(cancel: Event) -> Iterable[Progress]:
            chosen = corpus(data=corpus_path(path)) if path else built_in_treebank(self.treebank_sentences)
            self._read = chosen.report  # filled as the sentences are read
            return analyse(chosen.sentences, cancel)

        self.job.start(job)

    def stepped(self, progress: Progress) -> None:
        bar = self.query_one(JobProgress)
        if not progress.finished:
            if progress.partial is not None:  # what the run has found so far
                self.result = progress.partial
            self.say(self.step_text(progress))
            bar.stepped(progress.done, progress.total)
            if progress.partial is not None:
                self.draw()
            return
        self.result = progress.result
        data, conditions = self._run_on
        self.kept.runs[self.name_kept] = KeptRun.of(data, conditions, self.result, self.keep_view())
        bar.finished()
        self.say(self.done_text())  # the result's notes come with the step (JobRun)
        if self._read.skipped:
            self.notify(self._read.summary(), severity="warning", timeout=10)
        self.draw()

    def failed(self, reason: str) -> None:
        self.query_one(JobProgress).stopped()
        self.say("stopped: " + reason)

    def on_screen_suspend(self) -> None:
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None and kept.result is self.result:
            self.kept.runs[self.name_kept] = dataclasses.replace(kept, view=self.keep_view())

    def on_unmount(self) -> None:
        self.on_screen_suspend()

    def action_export(self) -> None:
        save_screen(self.app, self.name_kept, None if self.result is None else json_text(self.export_data()), ".json", self.figure)

    def export_data(self) -> dict[str, Any]:
        raise NotImplementedError

    def figure(self) -> Figure:
        """The figure `e` writes of what the screen shows (bertscope.figures)."""
        raise NotImplementedError

    def cancel_run(self) -> bool:
        """Stop the run under way; True when one was running."""
        self.query_one(JobProgress).stopped()
        return self.job.cancel()

    def action_back(self) -> None:
        if leave_input(self):
            return
        if self.cancel_run():
            self.say(self.cancelled_text())
            return
        self.dismiss(None)

    def step_text(self, progress: Progress) -> str:
        total = f" of {progress.total:,}" if progress.total else ""
        return f"{progress.stage}: {progress.done:,}{total} · escape cancels"

    def done_text(self) -> str:
        raise NotImplementedError

    def kept_text(self, kept: KeptRun) -> str:
        return f"{self.done_text()} · kept from before (r runs again)"

    def cancelled_text(self) -> str:
        return "cancelled (r runs again)"

    def draw(self) -> None:
        raise NotImplementedError
