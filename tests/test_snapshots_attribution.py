"""Snapshot of the explorer with the attribution row on (fake backend), at 80x24.

Update after an intended change of the look with
`pytest -n 0 tests/test_snapshots_attribution.py --snapshot-update` and review the SVG.
"""

from __future__ import annotations

from tests.helpers.ui import make_app, settle


def test_attribution_row(snap_compare):
    app = make_app(theme="dark", text="the keys to the [mask] are on the table", glyphs=False)

    async def integrated_gradients(pilot):
        await settle(pilot)
        await pilot.press("b", "b", "b")  # gradient, gradient x input, integrated gradients
        await settle(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=integrated_gradients)
