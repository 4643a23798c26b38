"""The explorer at 80×24, the smallest terminal it is made for (fake backend): nothing cut, nothing run together."""

from __future__ import annotations

import dataclasses

import pytest

from bertscope.ui.widgets.attention_view import AttentionView
from bertscope.ui.widgets.footer import KeyFooter
from bertscope.ui.widgets.panels import EffectPanel, StatusLine
from tests.fake_backend import FakeBackend
from tests.helpers.ui import make_app, open_screen, rendered, run, settle

SENTENCE = "the keys to the cabinet are on the table"


def screen_lines(app) -> list[str]:
    """What the terminal shows, line by line, without colour."""
    return ["".join(segment.text for segment in strip) for strip in app.screen._compositor.render_strips()]


@pytest.mark.parametrize("key", ["", "o", "p", "g", "c", "X", "C", "question_mark"])
def test_the_footer_shows_whole_keys_and_the_palette_key_last(key):
    app = make_app(text=SENTENCE)

    async def steps(pilot):
        if key:
            await open_screen(pilot, key)
        await pilot.pause()
        footer = screen_lines(app)[-1]
        assert footer.rstrip().endswith("▏^p palette"), footer  # nothing runs into it or past it
        keys = footer[: footer.index("▏")]
        assert "? help" in keys
        footer_widget = app.screen_stack[-2 if key == "question_mark" else -1].query_one(KeyFooter)  # the help shows the one under it
        shown = [child for child in footer_widget.children if "-command-palette" not in child.classes]
        assert all(child.region.right <= len(keys) for child in shown)  # none under the palette key
        if key == "p":  # probing's own keys, the description length's among them
            assert {"r", "m", "d"} <= {child.key for child in shown}, keys

    run(app, steps, size=(80, 24))


def test_the_footer_lays_its_keys_out_again_when_the_terminal_widens():
    app = make_app(text=SENTENCE)

    async def steps(pilot):
        narrow = screen_lines(app)[-1]
        await pilot.resize_terminal(160, 30)
        await settle(pilot)
        wide = screen_lines(app)[-1]
        assert "o overview" not in narrow and "o overview" in wide
        assert wide.rstrip().endswith("▏^p palette")

    run(app, steps, size=(80, 24))


class LongNamed(FakeBackend):
    @property
    def info(self):
        return dataclasses.replace(super().info, source="all-MiniLM-L6-v2 (bundled)")


def test_the_status_line_leaves_out_the_facts_that_do_not_fit_rather_than_cutting_one():
    from tests.helpers.ui import erase

    app = make_app(LongNamed(), text=SENTENCE)

    async def steps(pilot):
        await pilot.press("space")
        await settle(pilot)
        narrow = rendered(app.query_one(StatusLine)).strip()
        assert "1 masked (zero)" in narrow and "…" not in narrow and len(narrow) <= 78
        await erase(pilot, "upos", 1)  # what the passes run under goes before the device and the model's size
        narrow = rendered(app.query_one(StatusLine)).strip()
        assert "(bundled) · 1 masked (zero) · upos erased @1 · " in narrow and len(narrow) <= 78
        await pilot.resize_terminal(160, 30)
        await settle(pilot)
        wide = rendered(app.query_one(StatusLine)).strip()
        assert wide.endswith("1 masked (zero) · upos erased @1 · cpu · 3×4 heads · head · entropy")

    run(app, steps, size=(80, 24))


def test_the_effect_pane_shows_its_summary_at_80x24_with_six_layers(monkeypatch):
    from tests import fake_backend

    monkeypatch.setattr(fake_backend, "LAYERS", 6)  # the bundled model's grid
    backend = fake_backend.FakeBackend()
    backend.num_layers = 6
    app = make_app(backend, text=SENTENCE)

    async def steps(pilot):
        effect = app.query_one(EffectPanel)
        side = app.query_one("#side")
        summary_row = effect.content_region.y
        assert summary_row < side.region.bottom  # the line under its title is on screen
        assert "no heads masked" in screen_lines(app)[summary_row]

    run(app, steps, size=(80, 24))


def test_the_heatmap_title_says_before_masking_in_a_narrow_pane():
    app = make_app(text=SENTENCE)

    async def steps(pilot):
        await pilot.press("space", "n")  # head 0:0 off, and the norms: the longest title
        await settle(pilot)
        top = screen_lines(app)[3]
        assert "─ 0:0 · ‖αf‖ · before masking ─" in top and "…" not in top
        await pilot.resize_terminal(120, 30)
        await settle(pilot)
        assert "─ layer 0 · head 0 · ‖αf‖ · before masking (masked) ─" in screen_lines(app)[3]

    run(app, steps, size=(80, 24))


def test_every_probe_curve_shows_its_best_layer_mark_at_80_columns():
    app = make_app(text=SENTENCE)

    async def steps(pilot):
        await pilot.press("space")  # a mask for `m`
        await settle(pilot)
        await open_screen(pilot, "p")
        await pilot.press("r")
        await settle(pilot)
        app.screen.query_one("#task").value = "sentence_length"
        for key in ("r", "m"):
            await pilot.press(key)
            await settle(pilot)
        best_row = next(line for line in screen_lines(app) if line.lstrip().startswith("3 "))
        assert best_row.count("*") == 3, best_row  # two tasks, and the second under the mask

    run(app, steps, size=(80, 24))


def test_the_overview_names_the_norms_in_its_per_layer_table_at_80_columns():
    app = make_app(text=SENTENCE)

    async def steps(pilot):
        await open_screen(pilot, "o")
        assert any("attention per layer" in line for line in screen_lines(app))
        await pilot.press("n")
        await settle(pilot)
        lines = screen_lines(app)
        assert any("‖αf‖ norms per layer" in line for line in lines)
        assert not any("attention per layer" in line for line in lines)
        assert any("─ heads · ‖αf‖ norms ─" in line for line in lines)

    run(app, steps, size=(80, 24))


def test_the_prune_dialog_and_the_compare_box_are_not_cut_at_80_columns():
    app = make_app(text=SENTENCE)

    async def steps(pilot):
        await pilot.press("P")
        await pilot.pause()
        assert any("Prune to X%: switch off the least important X% of the heads " in line for line in screen_lines(app))
        await pilot.press("escape")
        await open_screen(pilot, "c")
        assert "model B: directory or Hugging Face name " in screen_lines(app)[1]

    run(app, steps, size=(80, 24))


WORDS = "the postman was delivering letters from international organisations to the cabinet".split()


def long_sentence(count: int = 200) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(count))


def test_a_long_input_at_80_columns_has_a_compact_gutter_a_ruler_and_the_cursor_s_labels_in_full():
    backend = FakeBackend()
    backend.max_length = 256
    app = make_app(backend, text=long_sentence(), glyphs=False)

    async def steps(pilot):
        view = app.query_one(AttentionView)
        assert view.dense_shown and view.weights.shape == (202, 202)
        pane = view.scrollable_content_region.width
        assert view.map_layout.gutter_width <= pane // 4 + 1  # one label a line, not two: a quarter of the pane at most
        labels = [strip.text for strip in view._labels]
        assert len(labels) == 2 and labels[0].startswith("0") and "10" in labels[0]  # the column numbers
        assert labels[1].startswith("▼") and "╵" in labels[1]  # and the cursor's column marked (column 0)
        await pilot.press("tab", "tab")  # the heatmap
        assert app.focused is view
        await pilot.press(*["down"] * 4, "end")  # row 4 "delivering", column 201 "[SEP]": one line would cut them
        await settle(pilot)
        header = [strip.text.rstrip() for strip in view._header]
        assert header == ["▸ 4:delivering", f"  → 201:[SEP]  {view.weights[4, 201]:.3f}"], header
        lines = screen_lines(app)
        top = view.content_region.y
        assert lines[top].rstrip(" │").endswith("▸ 4:delivering") and "→ 201:[SEP]" in lines[top + 1]
        ticks = lines[top + 3]
        assert "▼" in ticks  # scrolled to the last column, still marked
        row_line = next(line for line in lines[top + 4 :] if "▸" in line)
        assert "deliv" in row_line  # the cursor's row labelled on its line, though it is the lower of the two

    run(app, steps, size=(80, 24))


def test_a_ruler_number_cut_by_the_scroll_is_left_out():
    from bertscope.ui.widgets.attention_view import _cut_number

    text = "0         10        20        30"
    assert _cut_number(text, 11) == 1 and _cut_number(text, 10) == 0 and _cut_number(text, 3) == 0
    assert _cut_number(text[::-1], len(text) - 21) == 1  # "2" of "20" at the right edge


def test_the_overview_s_tables_scroll_from_the_keyboard_at_80x24():
    """Below the fold at 80×24, the syntax table was out of reach but for a mouse wheel."""
    from pathlib import Path

    app = make_app(text=SENTENCE)

    async def steps(pilot):
        screen = await open_screen(pilot, "o")
        box = screen.query_one("#corpus")
        box.value = str(Path(__file__).resolve().parents[1] / "bertscope" / "data" / "sample.conllu")
        await box.action_submit()
        await settle(pilot)
        charts = screen.query_one("#charts")
        assert charts.max_scroll_y > 0  # the syntax table is below the fold
        await pilot.press("tab")
        assert screen.focused is charts
        await pilot.press("pagedown")
        await pilot.pause()
        assert charts.scroll_y > 0

    run(app, steps, size=(80, 24))
