"""Snapshots of the patching screen (fake backend) at 80×24 and 160×48: the effects after a run.

Update after an intended change of the look with
`pytest -n 0 tests/test_snapshots_patching.py --snapshot-update`, convert the new SVGs under
tests/__snapshots__/ to PNG and look at them before committing.
"""

from __future__ import annotations

import pytest

from tests.helpers.ui import make_app, settle

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


async def patched(pilot):
    await settle(pilot)
    await pilot.press("X")
    await settle(pilot)
    await pilot.press("slash")
    pilot.app.screen.query_one("#patch-corrupt").value = "the key to the cabinet is on the table"
    await pilot.press("enter")
    await settle(pilot)
    await pilot.press("down", "down", "right")  # head 2:1, the largest effect


async def probe_noise(pilot):
    await settle(pilot)
    await pilot.press("X")
    await settle(pilot)
    await pilot.press("m", "d")  # the probe metric, noising
    await pilot.press("slash")
    pilot.app.screen.query_one("#patch-corrupt").value = "the key to the cabinet is on the table"
    await pilot.press("enter")
    await settle(pilot)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("steps", [patched, probe_noise], ids=["preserve", "probe_noise"])
def test_patching_screen(snap_compare, steps, size):
    app = make_app(theme="dark", text="the keys to the cabinet are on the table", glyphs=False, export_dir="/nonexistent")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=steps)
