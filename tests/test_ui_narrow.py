"""The explorer at 80×24, the smallest terminal it is made for (fake backend): nothing cut, nothing run together."""

from __future__ import annotations

import dataclasses

import pytest

from bertscope.ui.widgets.footer import KeyFooter
from bertscope.ui.widgets.panels import EffectPanel, StatusLine
from tests.fake_backend import FakeBackend
from tests.test_ui import make_app, rendered, run, settle
from tests.test_ui_keys import open_screen

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
    app = make_app(LongNamed(), text=SENTENCE)

    async def steps(pilot):
        await pilot.press("space")
        await settle(pilot)
        narrow = rendered(app.query_one(StatusLine)).strip()
        assert "1 masked (zero)" in narrow and "…" not in narrow and len(narrow) <= 78
        await pilot.resize_terminal(160, 30)
        await settle(pilot)
        wide = rendered(app.query_one(StatusLine)).strip()
        assert wide.endswith("1 masked (zero) · head · entropy")

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
