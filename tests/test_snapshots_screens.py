"""Snapshots of every screen of the explorer at 80×24 and 160×48 (fake backend).

What a person sees over SSH on a small terminal and on a large one: nothing essential
may be cut at 80×24. Update after an intended change of the look with
`pytest -n 0 tests/test_snapshots_screens.py --snapshot-update`, convert the new SVGs under
tests/__snapshots__/ to PNG and look at them before committing.
"""

from __future__ import annotations

import pytest

from tests.helpers.ui import make_app, settle

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}
SENTENCE = "the keys to the cabinet are on the table"


async def main_screen(pilot):
    await settle(pilot)
    await pilot.press("right", "down", "space", "left")  # head 1:1 off, looking at 1:0
    await settle(pilot)


async def overview(pilot):
    await settle(pilot)
    await pilot.press("o")
    await settle(pilot)
    await pilot.press("down", "right")


async def probing(pilot):
    await pilot.press("space")  # head 0:0 off, for `m`
    await settle(pilot)
    await pilot.press("p")
    await settle(pilot)
    await pilot.press("r")
    await settle(pilot)
    pilot.app.screen.query_one("#task").value = "sentence_length"
    await pilot.press("r")
    await settle(pilot)
    await pilot.press("m")
    await settle(pilot)


async def importance(pilot):
    await settle(pilot)
    await pilot.press("i")
    await settle(pilot)
    await pilot.press("space")
    await settle(pilot)


async def pruning_curve(pilot):
    await settle(pilot)
    await pilot.press("C")
    await settle(pilot)
    await settle(pilot)


async def geometry(pilot):
    await settle(pilot)
    await pilot.press("g")
    await settle(pilot)
    await pilot.press("left")  # layer 2


async def compare(pilot):
    await settle(pilot)
    await pilot.press("c")
    await settle(pilot)
    pilot.app.screen.query_one("#model-b").value = "finetuned-model"
    await pilot.app.screen.query_one("#model-b").action_submit()
    await settle(pilot)
    await pilot.press("down")


async def zoomed(pilot):
    await settle(pilot)
    await pilot.press("down", "z", "down", "down", "right")  # layer 1, the heatmap alone, cursor on 2:1
    await settle(pilot)


async def norms(pilot):
    await main_screen(pilot)
    await pilot.press("n")  # the heatmap of value-weighted norms ‖αf‖, its legend and title say so
    await settle(pilot)
    pilot.app.clear_notifications()  # the legend under the note
    await pilot.pause()


async def help_screen(pilot):
    await settle(pilot)
    await pilot.press("question_mark")
    await pilot.pause()


SCREENS = {
    "main": main_screen,
    "zoomed": zoomed,
    "overview": overview,
    "probing": probing,
    "importance": importance,
    "pruning_curve": pruning_curve,
    "geometry": geometry,
    "compare": compare,
    "help": help_screen,
}
SCREENS["norms"] = norms


async def mixing(pilot):
    await main_screen(pilot)
    await pilot.press("v", "n", "n")  # the layer view's value zeroing: title, legend, token pane and status line say so
    await settle(pilot)
    pilot.app.clear_notifications()
    await pilot.pause()


SCREENS["mixing"] = mixing


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen(snap_compare, screen, size):
    app = make_app(theme="dark", text=SENTENCE, glyphs=False, export_dir="/nonexistent")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=SCREENS[screen])
