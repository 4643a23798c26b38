"""The explorer driven by Textual's pilot on the fake backend: an app, waiting for its workers, what a widget shows."""

from __future__ import annotations

import asyncio

from bertscope.ui.app import ExplorerApp
from bertscope.ui.erasure import EraseScreen
from bertscope.ui.widgets.attention_view import AttentionView
from bertscope.ui.widgets.head_grid import HeadGrid
from tests.fake_backend import FakeBackend


def make_app(backend=None, **options) -> ExplorerApp:
    backend = backend or FakeBackend()
    options.setdefault("text", "the cat sat on the mat")
    app = ExplorerApp(lambda report: backend, **options)
    app.fake = backend
    return app


async def settle(pilot) -> None:
    """Let workers finish and their messages land."""
    from textual.worker import WorkerCancelled

    for _ in range(3):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:  # a newer request replaced it, as it should
            pass
        await pilot.pause()


async def overview_of(pilot, corpus=None):
    """`o`, and the overview's run over `corpus` (a path; None: the sample corpus it starts on) to its end."""
    from bertscope.ui.overview import OverviewScreen

    await pilot.press("o")
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, OverviewScreen)
    if corpus is not None:
        screen.query_one("#corpus").value = str(corpus)
        await screen.query_one("#corpus").action_submit()
    await settle(pilot)
    return screen


def run(app: ExplorerApp, steps, size=(100, 30)):
    async def go():
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            await steps(pilot)

    asyncio.run(go())


def rendered(widget) -> str:
    """The text a widget shows, without colour."""
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None, file=open("/dev/null", "w"))
    if isinstance(widget, AttentionView):
        return widget.plain_text
    if isinstance(widget, HeadGrid):
        renderable = widget.render()
    else:
        renderable = widget.content
    console.print(renderable)
    return console.export_text()


def heatmap_text(app) -> str:
    return rendered(app.query_one(AttentionView))


async def open_screen(pilot, key: str):
    await pilot.press(key)
    await settle(pilot)
    return pilot.app.screen


async def erase(pilot, task: str, layer: int) -> None:
    """`E`, the task and hidden state chosen in the dialog, Enter, and the eraser fitted."""
    await settle(pilot)
    await pilot.press("E")
    await pilot.pause()
    dialog = pilot.app.screen
    assert isinstance(dialog, EraseScreen)
    dialog.query_one("#erase-task").value = task
    dialog.query_one("#erase-layer").value = str(layer)
    await pilot.press("enter")
    await settle(pilot)
    await settle(pilot)
