"""The explorer's heatmap driven as a person would: zoom, colour scale, dense mode, fast keys."""

from __future__ import annotations

import numpy as np
import pytest
from textual import events

from bertscope.ui.widgets.attention_view import AttentionView
from bertscope.ui.widgets.head_grid import HeadGrid
from tests.fake_backend import FakeBackend
from tests.helpers.ui import make_app as make_any_app
from tests.helpers.ui import rendered, run, settle

README_SENTENCE = "the keys to the cabinet are on the table ."  # 12 tokens with [CLS] and [SEP]


def make_app(backend=None, **options):
    """The explorer in 256+ colours unless told otherwise (the headless console has none)."""
    options.setdefault("glyphs", False)
    return make_any_app(backend, **options)


def screen_lines(view: AttentionView) -> list[str]:
    """The view's lines as they are on screen now (scrolling, fixed gutter and header included)."""
    return [view.render_line(y).text for y in range(view.scrollable_content_region.height)]


def row_labels_on_screen(view: AttentionView) -> list[str]:
    """The row labels in the gutter of the lines on screen, top to bottom."""
    gutter = view.map_layout.gutter_width
    top = len(view._header) + len(view._labels)
    shown = min(view._window()[0], view.map_layout.lines - round(view.scroll_offset.y))
    lines = screen_lines(view)[top : top + shown]
    return [word for line in lines for word in line[: gutter - 1].split()]


async def send_together(pilot, *keys: str) -> None:
    """Keys that arrive in one write (as over SSH): all queued before the app handles any."""
    for key in keys:
        event = events.Key(key, None)
        event.set_sender(pilot.app)
        pilot.app._driver.send_message(event)
    await settle(pilot)


def test_arrow_keys_that_arrive_together_all_move_the_heatmap_cursor():
    app = make_app(text=README_SENTENCE)

    async def steps(pilot):
        app.query_one(AttentionView).focus()
        await send_together(pilot, "down", "down", "down", "down")
        assert app.state.cursor == (4, 0)
        await send_together(pilot, "right", "right", "right", "up")
        assert app.state.cursor == (3, 3)
        await pilot.press("down", "down", "down", "down")
        assert app.state.cursor == (7, 3)
        assert "7:on → 3:to" in app.query_one(AttentionView).plain_text
        await send_together(pilot, "up", "left", "s", "up", "d", "left")  # other keys repaint before the moves land
        assert app.state.cursor == (5, 1) and app.main_screen.heatmap_pane.scale == "row" and app.main_screen.heatmap_pane.dense

    run(app, steps)


def test_z_gives_the_heatmap_the_whole_screen_and_shows_the_readme_map_whole_at_80_by_24():
    app = make_app(text=README_SENTENCE)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        tokens = list(app.main_screen.analysis.current.tokens)
        assert len(tokens) == 12
        await pilot.press("z")
        await pilot.pause()
        assert not app.query_one("#side").display and not app.query_one("#inputs").display
        assert view.region.width >= 78 and app.focused is view
        assert row_labels_on_screen(view) == tokens  # every row and its label at once
        assert view.map_layout.cell_width == 2  # room to spare: square cells
        assert view.virtual_size.height <= view.scrollable_content_region.height  # nothing to scroll
        await pilot.press("z")
        await pilot.pause()
        assert app.query_one("#side").display and app.query_one("#inputs").display
        assert app.focused is app.query_one("#grid")

    run(app, steps, size=(80, 24))


def test_a_40_token_map_is_whole_on_screen_at_160_by_48_without_zoom():
    backend = FakeBackend()
    backend.max_length = 64
    words = " ".join(f"w{i}" for i in range(38))  # 40 tokens with [CLS] and [SEP]
    app = make_app(backend, text=words)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        tokens = list(app.main_screen.analysis.current.tokens)
        assert len(tokens) == 40
        assert view.dense_shown  # 40 rows do not fit the pane's 41 lines with header and legend: two a line
        assert row_labels_on_screen(view) == tokens[::2]  # one label a line: the upper row's, or the cursor's
        assert view.virtual_size.width <= view.scrollable_content_region.width
        assert view.virtual_size.height <= view.scrollable_content_region.height

    run(app, steps, size=(160, 48))


def test_s_cycles_the_colour_scale_and_the_legend_gives_its_numbers():
    app = make_app(text=README_SENTENCE)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        weights = view.weights
        legend = lambda: view.plain_text.splitlines()[-1].split()  # noqa: E731
        assert legend()[0] == "max" and legend()[1] == "0.00" and legend()[-1] == f"{weights.max():.2f}"
        await pilot.press("s")
        assert app.main_screen.heatmap_pane.scale == "row" and legend()[:2] == ["row", "0"]
        assert legend()[-3:] == ["row", "max", f"{weights[0].max():.2f}"]  # the cursor's row
        await pilot.press("s")
        assert legend()[0] == "fixed" and (legend()[1], legend()[-1]) == ("0.00", "1.00")
        await pilot.press("s")
        assert legend()[0] == "log" and legend()[-1] == f"{weights.max():.2f}"
        assert float(legend()[1]) == pytest.approx(weights.max() / 1000, rel=0.05)
        await pilot.press("s")
        assert app.main_screen.heatmap_pane.scale == "max"

    run(app, steps)


def test_d_switches_dense_mode_which_halves_the_lines():
    app = make_app(text=README_SENTENCE)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        assert not view.dense_shown and view.map_layout.lines == 12
        await pilot.press("d")
        assert view.dense_shown and view.map_layout.lines == 6
        tokens = list(app.main_screen.analysis.current.tokens)
        assert row_labels_on_screen(view) == tokens[::2]  # one label a line: the upper row's, the cursor's where it is
        view.focus()
        await pilot.press("down", "down", "down")  # row 3, the lower of line 1
        assert row_labels_on_screen(view) == [tokens[0], tokens[3], *tokens[4::2]]
        await pilot.press("d")
        assert not view.dense_shown and view.map_layout.lines == 12

    run(app, steps)


def test_dense_mode_with_shade_glyphs_stays_one_row_a_line():
    app = make_app(text=README_SENTENCE, glyphs=True)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        await pilot.press("d")
        assert not view.dense_shown and view.map_layout.lines == 12
        assert "dense needs colours" in " ".join(str(n.message) for n in app._notifications)

    run(app, steps)


def test_row_labels_and_header_stay_while_the_grid_scrolls_both_ways():
    backend = FakeBackend()
    backend.max_length = 64
    words = " ".join(f"word{i}" for i in range(50))
    app = make_app(backend, text=words)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        view.focus()
        app.main_screen.heatmap_pane.dense = False
        await send_together(pilot, *["down"] * 45, *["right"] * 45)
        assert app.state.cursor == (45, 45)
        assert view.scroll_offset.y > 0 and view.scroll_offset.x > 0  # the grid has scrolled
        lines = screen_lines(view)
        # the header stays on top, on two lines in this narrow pane, so that neither label is cut
        assert lines[0].startswith("▸ 45:word44 ") and lines[1].lstrip().startswith("→ 45:word44 ")
        labels = row_labels_on_screen(view)
        assert labels[-1] == "word44" and len(labels) >= 5  # the rows on screen, up to the cursor's, labelled
        assert labels == [f"word{i}" for i in range(45 - len(labels), 45)]
        await send_together(pilot, "home", *["up"] * 45)
        assert app.state.cursor == (0, 0)
        assert view.scroll_offset == (0, 0)
        assert row_labels_on_screen(view)[0] == "[CLS]"

    run(app, steps, size=(80, 24))


@pytest.mark.parametrize("glyphs", [False, True])
def test_grid_legend_gives_the_selected_value_and_the_range_of_the_shades(glyphs):
    app = make_app(text=README_SENTENCE, glyphs=glyphs)

    async def steps(pilot):
        grid = app.query_one(HeadGrid)
        *_, label, values = rendered(grid).rstrip().splitlines()
        assert label.strip() == "entropy (nats)"
        value = app.main_screen.analysis.figures["entropy"][0, 0] + 0.0  # no "-0.000"
        high = np.log(12)
        assert values.split()[:4] == ["0:0", "=", f"{value:.3f}", "0"] and values.split()[-1] == f"{high:.3g}"
        assert ("░▒▓█" in values) == glyphs
        await pilot.press("f", "f", "f", "f")  # attention to the token itself
        *_, label, values = rendered(grid).rstrip().splitlines()
        assert label.strip() == "attn to itself"
        assert values.split()[:3] == ["0:0", "=", f"{app.main_screen.analysis.figures['self'][0, 0]:.3f}"] and values.split()[-1] == "1"
        grid.show(grid.values, grid.value_range, "a figure named at more length than the grid is wide", grid.mask, (0, 0))
        *_, label, values = rendered(grid).rstrip().splitlines()
        assert label.strip() == "a figure named at more le…"  # the label is cut to the grid, not the value
        assert values.split()[:3] == ["0:0", "=", f"{app.main_screen.analysis.figures['self'][0, 0]:.3f}"]

    run(app, steps)


def test_heatmap_keys_do_nothing_on_a_screen_pushed_over_the_explorer():
    app = make_app()

    async def steps(pilot):
        await pilot.press("o")
        await pilot.pause()
        overview = app.screen
        await pilot.press("s", "d", "z")
        pane = app.main_screen.heatmap_pane
        assert pane.scale == "max" and pane.dense is None and not overview.has_class("-zoomed")

    run(app, steps)


def test_a_click_on_a_cell_moves_the_cursor_there():
    app = make_app(text=README_SENTENCE)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        layout = view.map_layout
        x = 1 + 1 + layout.gutter_width + 5 * layout.cell_width  # border, padding, row labels, five columns
        y = 1 + len(view._header) + len(view._labels) + 3  # border, header line, column labels, three rows
        await pilot.click(AttentionView, offset=(x, y))
        await pilot.pause()
        assert app.state.cursor == (3, 5)
        assert "▸ 3:to → 5:cabinet" in view.plain_text

    run(app, steps)


def test_slash_while_zoomed_brings_the_sentence_box_back():
    app = make_app(text=README_SENTENCE)

    async def steps(pilot):
        await pilot.press("z")
        await pilot.pause()
        assert not app.query_one("#inputs").display
        await pilot.press("slash")
        await pilot.pause()
        assert app.query_one("#inputs").display and app.focused is app.query_one("#sentence")

    run(app, steps)
