"""What a new user found at 80×24 and 160×48 (issue 54): idle progress bars, probing's `d` and control task,
notifications over the heatmap, cut column labels and an unused pane, the overview's corpus field."""

from __future__ import annotations

import asyncio

import numpy as np
from rich.console import Console
from textual.widgets._toast import Toast

from bertscope.base.theming import Colormap
from bertscope.render.heatmap import AttentionHeatmap, Cells, Labels
from bertscope.ui.widgets.attention_view import AttentionView
from bertscope.ui.widgets.job_progress import JobProgress
from bertscope.ui.widgets.panels import StatusLine
from tests.helpers.ui import make_app, rendered, run, settle

COLORMAP = Colormap(("#000000", "#ff8000", "#ffff00"), masked="#404040", cursor="#00ffff")
README_SENTENCE = "the keys to the cabinet are on the table"  # 11 tokens with [CLS] and [SEP]


async def open_screen(pilot, key: str):
    await pilot.press(key)
    await settle(pilot)
    return pilot.app.screen


def column_labels(view: AttentionView) -> list[str]:
    """The column labels as the view shows them, one per column: read downwards in one-cell columns, across (each
    from its column's first cell) in wider ones."""
    layout = view.map_layout
    lines = [strip.text for strip in view._labels]
    cols, width = len(view.weights[0]), layout.cell_width
    if width == 1:
        return ["".join(line[col] for line in lines if col < len(line)).strip() for col in range(cols)]
    words = []
    for col in range(cols):
        line = lines[col % len(lines)]
        start = col * width
        end = (col + len(lines)) * width - 1
        words.append(line[start:end].strip())
    return words


def test_progress_bars_stand_still_until_a_job_runs_and_after_it_stops():
    app = make_app()

    async def steps(pilot):
        screen = await open_screen(pilot, "p")  # probing: nothing runs until r
        bar = screen.query_one(JobProgress)
        assert not bar.moving and bar.percentage == 0
        app.fake.release.clear()  # the run waits before its first step: the bar pulses while it does
        await pilot.press("r")
        await pilot.pause()
        assert bar.moving
        await pilot.press("escape")  # cancelled before it said how far it got: it stands still again
        app.fake.release.set()
        await settle(pilot)
        assert not bar.moving and "cancelled" in rendered(screen.query_one("#probe-status"))
        await pilot.press("r")
        await settle(pilot)
        assert not bar.moving and bar.percentage == 1  # done: full, not pulsing
        await pilot.press("escape")
        await settle(pilot)
        screen = await open_screen(pilot, "X")  # patching: nothing runs until Enter
        assert not screen.query_one(JobProgress).moving

    run(app, steps)


def test_d_fits_the_codes_of_the_curves_drawn_without_them_and_escape_stops_it():
    app = make_app()

    async def steps(pilot):
        screen = await open_screen(pilot, "p")
        await pilot.press("r")
        await settle(pilot)
        app.fake.release.clear()  # hold the run `d` starts
        await pilot.press("d")
        await pilot.pause()
        curves = rendered(screen.query_one("#curves-content"))
        assert "… : being fitted" in curves and "—" not in curves  # not a column of dashes: it is on its way
        assert "fitting its description length" in rendered(screen.query_one("#probe-status"))
        assert app.fake.probe_calls[-1][0] == "bigram_shift"
        await pilot.press("escape")
        app.fake.release.set()
        await settle(pilot)
        curves = rendered(screen.query_one("#curves-content"))
        assert "—" in curves and "d twice, or r, fits them" in curves  # stopped: it says how to get them
        assert not screen.reports["bigram_shift"].mdl
        await pilot.press("d", "d")
        await settle(pilot)
        assert screen.reports["bigram_shift"].mdl and "4.00 *" in rendered(screen.query_one("#curves-content"))

    run(app, steps)


def test_a_notification_hides_neither_the_heatmaps_rows_nor_the_status_line_at_80_by_24():
    app = make_app(text=README_SENTENCE)

    async def go():
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await settle(pilot)
            app.notify("saved bertscope-attention-0-0.svg and bertscope-attention-0-0.csv in the export folder", timeout=30)
            await pilot.pause(0.2)
            [toast] = app.screen.query(Toast)
            view = app.query_one(AttentionView)
            content = view.content_region
            grid_top = content.y + len(view._header) + len(view._labels)
            grid = content.intersection(content._replace(y=grid_top, height=content.bottom - grid_top))
            assert toast.region.height and not toast.region.overlaps(grid)
            assert not toast.region.overlaps(app.query_one(StatusLine).region)

    asyncio.run(go())


def test_column_labels_of_short_tokens_are_whole_at_80_by_24():
    app = make_app(text=README_SENTENCE)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        labels = column_labels(view)
        tokens = list(app.main_screen.analysis.current.tokens)
        assert view.map_layout.cell_width == 1  # one cell a column: written downwards
        assert [label for label, token in zip(labels, tokens) if len(token) <= 5] == [t for t in tokens if len(t) <= 5]
        assert labels[0] == "[CLS]" and labels[-1] == "[SEP]"
        assert labels[tokens.index("cabinet")] == "cabi…"  # a longer one says it is cut

    run(app, steps, size=(80, 24))


def test_the_heatmap_uses_the_room_at_160_by_48():
    app = make_app(text=README_SENTENCE)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        layout = view.map_layout
        pane = view.scrollable_content_region
        assert layout.cell_width >= 4 and layout.row_height >= 2  # wider and taller cells than at 80×24
        assert layout.gutter_width + layout.grid_width >= pane.width // 2  # not a corner of an empty pane
        assert len(view._header) + len(view._labels) + layout.lines + 1 <= pane.height  # every row, no scrolling
        assert column_labels(view) == list(app.main_screen.analysis.current.tokens)  # written across, whole
        view.focus()
        await pilot.press("down", "down", "right")  # the cursor's row is labelled, and the view follows it
        assert app.state.cursor == (2, 1) and "2:keys → 1:the" in view.plain_text

    run(app, steps, size=(160, 48))


def test_wide_cells_tall_rows_and_staggered_labels_in_the_renderer():
    """The renderer's wider cells, rows of several lines and labels written across on alternate lines; the CLI's
    defaults (cells of two, a line a row, labels downwards) are unchanged."""
    labels = ["[CLS]", "cabinet", "on", "x"]
    weights = np.eye(4)
    console = Console(width=80, color_system=None, record=True, file=open("/dev/null", "w"))
    heatmap = AttentionHeatmap(
        weights,
        labels,
        labels,
        COLORMAP,
        cursor=(1, 1),
        legend=False,
        cells=Cells(width=4, height=2, glyphs=True),
        labels=Labels(staggered=True, height=2, width=None),
    )
    console.print(heatmap)
    lines = console.export_text().splitlines()
    assert lines[0].split() == ["▸", "1:cabinet", "→", "1:cabinet", "1.000"]
    assert lines[1][8:].rstrip() == "[CLS]   on"  # columns 0 and 2, each from its first cell
    assert lines[2][12:].rstrip() == "cabinet x"  # columns 1 and 3 on the next line
    grid = lines[3:]
    assert len(grid) == 8 and grid[0].startswith("  [CLS] ████") and grid[1].strip() == "████"  # two lines a row
    assert grid[2].startswith("cabinet▸    [  ]")  # the cursor's cell, four wide
    plain = Console(width=80, color_system=None, record=True, file=open("/dev/null", "w"))
    plain.print(AttentionHeatmap(weights, labels, labels, COLORMAP, legend=False, cells=Cells(glyphs=True)))
    cli = plain.export_text().splitlines()
    assert cli[0].strip() == "c" and cli[6].strip() == "] t n x"  # the CLI's: downwards, two cells a column


def test_the_overview_names_the_shipped_sample_as_the_user_knows_it():
    app = make_app()

    async def steps(pilot):
        screen = await open_screen(pilot, "o")
        box = screen.query_one("#corpus")
        assert box.value == "sample corpus"
        assert screen.result is not None and screen.result.sentences > 0  # and runs on it
        assert "done" in rendered(screen.query_one(".progress-text"))
        await pilot.press("escape")
        await settle(pilot)
        screen = await open_screen(pilot, "o")
        assert screen.query_one("#corpus").value == "sample corpus"  # kept as typed

    run(app, steps)
