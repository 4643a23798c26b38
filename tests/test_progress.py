"""The one progress record of the core, `outcome` that drains it, and the UI's `JobRun` that runs it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from textual.app import App
from textual.widgets import Static

from bertscope.base.errors import Cancelled, InputError
from bertscope.base.progress import Progress, Unfinished, outcome
from bertscope.ui.job_run import JobRun


def counting(n: int, result="done", seen: list | None = None):
    for done in range(1, n + 1):
        if seen is not None:
            seen.append(done)
        yield Progress("counting", done, n, result if done == n else None)


def test_outcome_returns_the_last_result_and_shows_every_step():
    steps = []
    assert outcome(counting(3), on_step=steps.append) == "done"
    assert [(s.done, s.total, s.finished) for s in steps] == [(1, 3, False), (2, 3, False), (3, 3, True)]


def test_outcome_of_a_run_that_stopped_early_names_it():
    with pytest.raises(Unfinished, match="probing stopped before it finished"):
        outcome(counting(3, result=None), "probing")
    with pytest.raises(Unfinished):
        outcome(iter(()), "probing")


def test_outcome_stops_reading_once_cancelled():
    cancel, seen = threading.Event(), []
    with pytest.raises(Cancelled, match="probing was cancelled"):
        outcome(counting(100, seen=seen), "probing", on_step=lambda step: cancel.set() if step.done == 2 else None, cancel=cancel)
    assert seen == [1, 2]


class Owner(App):
    def __init__(self) -> None:
        super().__init__()
        self.steps: list[Progress] = []
        self.failures: list[str] = []

    def compose(self):
        yield Static(id="owner")

    def on_mount(self) -> None:
        self.job = JobRun(self.query_one(Static), self.steps.append, name="test", on_failed=self.failures.append, title="job")


def drive(steps_of_test):
    app = Owner()

    async def go():
        async with app.run_test() as pilot:
            await steps_of_test(app, pilot)

    asyncio.run(go())
    return app


async def until(pilot, condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.01)


def test_each_step_reaches_the_owner_and_the_run_ends_with_its_result():
    async def steps(app, pilot):
        app.job.start(lambda cancel: counting(3))
        assert app.job.running
        await until(pilot, lambda: app.steps and app.steps[-1].finished)
        assert not app.job.running and app.steps[-1].result == "done"
        assert [s.done for s in app.steps] == sorted(s.done for s in app.steps)

    drive(steps)


def test_a_new_run_drops_what_the_old_one_sent_before_it():
    started, go, sent = threading.Event(), threading.Event(), threading.Event()

    def old(cancel):
        started.set()
        go.wait(5)
        yield Progress("old", 1, 2)
        sent.set()  # step 1 is on its way to the UI thread
        yield Progress("old", 2, 2, "old result")

    async def steps(app, pilot):
        app.job.start(old)
        await until(pilot, started.is_set)
        go.set()
        assert sent.wait(5)  # the UI thread stays busy here: the old step waits for it
        app.job.start(lambda cancel: counting(2, result="new result"))
        await until(pilot, lambda: app.steps and app.steps[-1].finished)
        await pilot.pause(0.2)
        assert [s.stage for s in app.steps] == ["counting"] * len(app.steps) and app.steps[-1].result == "new result"

    drive(steps)


def test_a_backlog_of_steps_collapses_to_the_newest():
    def many(cancel):
        yield from counting(500)

    async def steps(app, pilot):
        first_shown = threading.Event()

        def slow_owner(step):  # the UI thread busy with a repaint while the worker runs ahead
            app.steps.append(step)
            if not first_shown.is_set():
                first_shown.set()
                time.sleep(0.3)

        app.job._on_step = slow_owner
        app.job.start(many)
        await until(pilot, lambda: app.steps and app.steps[-1].finished)
        assert app.steps[-1].done == 500 and len(app.steps) < 50  # not 500 repaints queued up

    drive(steps)


def test_a_failure_is_a_notification_and_cancel_is_quiet():
    def failing(cancel):
        yield Progress("reading", 1, 2)
        raise InputError("the corpus is empty; give a file with sentences")

    def endless(cancel):
        while not cancel.is_set():
            yield Progress("waiting", 0)
            time.sleep(0.01)

    async def steps(app, pilot):
        app.job.start(failing)
        await until(pilot, lambda: app.failures)
        assert app.failures == ["the corpus is empty; give a file with sentences"] and not app.job.running
        assert [(n.title, n.message) for n in app._notifications] == [("job", "the corpus is empty; give a file with sentences")]
        app.job.start(endless)
        await until(pilot, lambda: app.steps)
        assert app.job.cancel() and not app.job.running
        assert not app.job.cancel()  # nothing running any more
        await pilot.pause(0.2)
        assert len(app.failures) == 1  # a cancelled run is not a failure

    drive(steps)


def test_a_job_that_ends_without_its_result_says_so():
    async def steps(app, pilot):
        app.job.start(lambda cancel: counting(2, result=None))
        await until(pilot, lambda: app.failures)
        assert app.failures == ["the run stopped before it finished"]

    drive(steps)


def test_relay_passes_a_sub_jobs_steps_on_and_returns_its_result():
    from bertscope.base.progress import Progress, relay

    def job(finished: bool):
        yield Progress("a", 1, 2)
        if finished:
            yield Progress("a", 2, 2, result="done")

    def outer(finished: bool):
        result = yield from relay(job(finished), lambda step: Progress("outer " + step.stage, step.done, 4))
        yield Progress("outer", 4, 4, result=result)

    steps = list(outer(True))
    assert [(step.stage, step.done, step.total) for step in steps[:-1]] == [("outer a", 1, 4)]
    assert steps[-1].result == "done"  # the sub-job's last step is its result, not passed on as a step
    assert list(outer(False))[-1].result is None  # a sub-job that stopped (cancelled) returns None


def test_the_notes_of_an_outcome_are_shown_once_it_arrives():
    def noted(cancel):
        yield Progress("reading", 1, 2)
        yield Progress("reading", 2, 2, "done", notes=("skipped 3 lines of corpus.txt (first: line 7: empty)",))

    async def steps(app, pilot):
        app.job.start(noted)
        await until(pilot, lambda: app.steps and app.steps[-1].finished)
        await pilot.pause(0.1)
        assert [(n.title, n.message) for n in app._notifications] == [("job", "skipped 3 lines of corpus.txt (first: line 7: empty)")]
        assert not app.failures

    drive(steps)
