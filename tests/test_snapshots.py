"""Snapshots of the main screen, in two themes and two terminal sizes (fake backend).

Update after an intended change of the look with `pytest -n 0 tests/test_snapshots.py --snapshot-update`
and review the new SVGs under tests/__snapshots__/.
"""

from __future__ import annotations

import pytest

from tests.helpers.ui import make_app, settle

SIZES = {"100x30": (100, 30), "80x24": (80, 24)}


@pytest.mark.parametrize("theme", ["dark", "light"])
@pytest.mark.parametrize("size", list(SIZES))
def test_main_screen(snap_compare, theme, size):
    app = make_app(theme=theme, text="the keys to the cabinet are on the table", glyphs=False)

    async def masked_head_selected(pilot):
        await settle(pilot)
        await pilot.press("right", "down", "space")  # head 1:1 off
        await pilot.press("left")  # look at its neighbour 1:0
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=masked_head_selected)


def test_main_screen_in_glyphs(snap_compare):
    """What a 16-colour terminal or NO_COLOR shows: shade characters instead of colours."""
    app = make_app(theme="dark", text="the keys to the cabinet are on the table", glyphs=True)
    assert snap_compare(app, terminal_size=SIZES["80x24"], run_before=settle)
