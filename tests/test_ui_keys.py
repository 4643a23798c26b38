"""Keys that always do what they say, results that stay, and `e` on every screen (fake backend)."""

from __future__ import annotations

import csv
import io
import json

from textual import events
from textual.widgets import Input, Select

from bertscope.ui.geometry import GeometryScreen, Scatter
from bertscope.ui.importance import PruningCurveScreen
from bertscope.ui.overview import OverviewScreen
from bertscope.ui.probing import ProbingScreen
from bertscope.ui.widgets.head_grid import HeadGrid
from bertscope.ui.widgets.panels import EffectPanel
from bertscope.ui.widgets.pattern_grid import PatternGrid
from tests.helpers.ui import heatmap_text, make_app, open_screen, rendered, run, settle

# focus


def test_enter_in_the_sentence_gives_the_keys_back_to_the_grid():
    app = make_app()

    async def steps(pilot):
        assert app.focused is app.query_one(HeadGrid)  # opens on the main widget
        await pilot.press("slash")
        sentence = app.query_one("#sentence", Input)
        assert app.focused is sentence
        sentence.value = ""
        await pilot.press(*"a dog barked", "enter")
        await settle(pilot)
        assert app.focused is app.query_one(HeadGrid)
        await pilot.press("v")  # a command now, not a letter of the sentence
        assert sentence.value == "a dog barked" and app.state.view == "average"
        assert "mean of 4 heads" in heatmap_text(app)
        await pilot.press("x", "o")  # nothing is typed into either box
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)
        assert sentence.value == "a dog barked" and app.query_one("#pair", Input).value == ""

    run(app, steps)


def test_escape_leaves_the_sentence_box_then_cancels():
    app = make_app()

    async def steps(pilot):
        await pilot.press("slash", *" and more")
        await pilot.press("escape")
        assert app.focused is app.query_one(HeadGrid)
        await pilot.press("down")  # the grid moves again
        assert app.state.layer == 1
        await pilot.click("#pair")
        assert app.focused is app.query_one("#pair", Input)
        await pilot.press("escape", "right")
        assert app.focused is app.query_one(HeadGrid) and app.state.head == 1

    run(app, steps)


def test_main_screen_keys_do_nothing_on_a_screen_pushed_over_it():
    app = make_app()

    async def steps(pilot):
        probing = await open_screen(pilot, "p")
        await pilot.press("o", "g", "v", "a")  # the overview, geometry, view and ablation are the main screen's
        await settle(pilot)
        assert app.screen is probing and len(app.screen_stack) == 2
        assert app.state.view == "head" and app.state.ablation == "zero"
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("v")
        assert app.state.view == "average"

    run(app, steps)


def test_the_palette_offers_the_main_screens_commands_on_that_screen_alone():
    app = make_app()

    def titles() -> set[str]:
        return {command.title for command in app.get_system_commands(app.screen)}

    async def steps(pilot):
        await settle(pilot)
        assert {"Toggle head", "Overview", "Keys"} <= titles()
        await open_screen(pilot, "p")
        assert "Keys" in titles() and not titles() & {"Toggle head", "Overview", "Unmask all"}

    run(app, steps)


def test_tab_reaches_the_effect_pane_and_arrows_scroll_to_its_last_layer():
    app = make_app(text="the keys to the cabinet are on the table")

    async def steps(pilot):
        await pilot.press("tab")  # grid -> effect pane (the next in the side column)
        effect = app.query_one(EffectPanel)
        assert app.focused is effect
        side = app.query_one("#side")
        await pilot.press("down", "down", "down", "down", "down", "down", "down", "down")
        await pilot.pause()
        assert side.scroll_y == side.max_scroll_y
        assert effect.region.bottom <= side.region.bottom  # its last row is on screen

    run(app, steps, size=(80, 24))


def test_geometry_opens_on_the_scatter_and_brackets_move_the_layer():
    app = make_app()

    async def steps(pilot):
        screen = await open_screen(pilot, "g")
        assert isinstance(screen, GeometryScreen) and isinstance(screen.focused, Scatter)
        assert screen.shown_layer == 3
        await pilot.press("right_square_bracket", "right_square_bracket", "left_square_bracket", "f")
        assert screen.shown_layer == 0 and screen.label == "parity"
        assert screen.query_one("#geometry-corpus", Input).value == ""  # nothing typed into the box
        await pilot.press("tab")
        assert screen.focused is screen.query_one("#geometry-side")  # tab leaves the box too
        await pilot.press("slash", *"x.txt")
        assert screen.query_one("#geometry-corpus", Input).value == "x.txt"
        await pilot.press("escape")
        assert isinstance(app.screen, GeometryScreen) and isinstance(screen.focused, Scatter)
        await pilot.press("right")
        assert screen.shown_layer == 1
        await pilot.press("escape")
        assert not isinstance(app.screen, GeometryScreen)

    run(app, steps)


def test_every_screen_opens_on_its_main_widget():
    app = make_app()

    async def steps(pilot):
        expected = {"o": PatternGrid, "p": None, "g": Scatter, "c": PatternGrid}
        for key, kind in expected.items():
            screen = await open_screen(pilot, key)
            focused = screen.focused
            if kind is None:
                assert focused is screen.query_one("#curves")
            else:
                assert isinstance(focused, kind)
            await pilot.press("escape")
            await settle(pilot)
        screen = await open_screen(pilot, "C")
        assert isinstance(screen, PruningCurveScreen) and screen.focused is screen.query_one("#curve")

    run(app, steps)


def test_probing_slash_chooses_the_task_and_escape_leaves_it():
    app = make_app()

    async def steps(pilot):
        screen = await open_screen(pilot, "p")
        await pilot.press("slash")
        assert isinstance(screen.focused, Select)
        await pilot.press("escape")
        assert isinstance(app.screen, ProbingScreen) and screen.focused is screen.query_one("#curves")
        await pilot.press("r")
        await settle(pilot)
        assert list(screen.reports) == ["bigram_shift"]

    run(app, steps)


def test_batched_arrow_keys_all_move_the_grid():
    """Over SSH several keys often arrive in one read; each one counts."""
    app = make_app()

    async def steps(pilot):
        for key in ("right", "right", "right", "down", "down"):  # posted at once, no pause between
            app.post_message(events.Key(key, None))
        await pilot.pause()
        await pilot.pause()
        assert (app.state.layer, app.state.head) == (2, 3)
        assert app.query_one(HeadGrid).selected == (2, 3)

    run(app, steps)


# results stay


def test_corpus_results_are_kept_across_screens(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i}" for i in range(7)))
    app = make_app()

    async def steps(pilot):
        screen = await open_screen(pilot, "o")
        screen.query_one("#corpus").value = str(corpus)
        await screen.query_one("#corpus").action_submit()
        await settle(pilot)
        first = screen.result
        await pilot.press("escape")
        await settle(pilot)
        forwards = len(app.fake.calls)
        screen = await open_screen(pilot, "o")
        assert screen.result is first and not screen.running  # not run again
        assert screen.query_one("#corpus").value == str(corpus)
        assert "kept from before" in rendered(screen.query_one(".progress-text"))
        assert screen.query_one(PatternGrid).classes_of is not None and len(app.fake.calls) == forwards
        await pilot.press("escape")

        screen = await open_screen(pilot, "g")
        await pilot.press("left", "f")  # layer 2, coloured by parity
        kept = screen.result
        await pilot.press("escape")
        await settle(pilot)
        screen = await open_screen(pilot, "g")
        assert screen.result is kept and (screen.shown_layer, screen.label) == (2, "parity")
        assert "layer 2 · PC1" in rendered(screen.query_one("#scatter"))
        await pilot.press("escape")

        screen = await open_screen(pilot, "c")
        screen.query_one("#model-b").value = "tuned"
        await screen.query_one("#model-b").action_submit()
        await settle(pilot)
        kept = screen.result
        await pilot.press("escape")
        screen = await open_screen(pilot, "c")
        assert screen.result is kept and screen.query_one("#model-b").value == "tuned"
        assert "cosine 1.000" in rendered(screen.query_one("#compare-head"))

    run(app, steps)


def test_probe_curves_are_kept_and_m_rescores_them_without_a_rerun():
    app = make_app()

    async def steps(pilot):
        screen = await open_screen(pilot, "p")
        await pilot.press("r")
        await settle(pilot)
        await pilot.press("escape")
        await pilot.press("space")  # mask head 0:0 in the explorer
        await settle(pilot)
        runs = len(app.fake.probe_calls)
        screen = await open_screen(pilot, "p")
        assert list(screen.reports) == ["bigram_shift"]
        assert "0.800" in rendered(screen.query_one("#curves-content"))
        await pilot.press("m")
        await settle(pilot)
        assert len(app.fake.probe_calls) == runs + 1  # only the masked run
        assert list(screen.reports) == ["bigram_shift", "bigram_shift · mask 0:0"]
        assert "0.750" in rendered(screen.query_one("#curves-content"))

    run(app, steps)


def test_pruning_curve_is_kept():
    app = make_app()

    async def steps(pilot):
        screen = await open_screen(pilot, "C")
        await settle(pilot)
        curve = screen.result
        assert curve is not None
        await pilot.press("escape")
        screen = await open_screen(pilot, "C")
        assert screen.result is curve and not screen.running

    run(app, steps)


# export on every screen


def exported(tmp_path, name: str) -> list:
    return sorted(path.name for path in tmp_path.glob(f"bertscope-{name}-*"))


def test_e_exports_every_screen_and_never_overwrites(tmp_path):
    app = make_app(export_dir=tmp_path)

    async def steps(pilot):
        screen = await open_screen(pilot, "o")
        await pilot.press("e", "e")  # two at once: two exports, written one after the other
        await settle(pilot)
        files = exported(tmp_path, "overview")
        assert len(files) == 4 and sum(f.endswith(".csv") for f in files) == 2  # a second export, not an overwrite
        table = list(csv.DictReader(io.StringIO((tmp_path / files[0]).read_text())))
        assert len(table) == 12 and table[6]["layer"] == "1" and table[6]["head"] == "2" and table[6]["pattern"] == "block"
        assert float(table[0]["cls"]) == 0.1 and "share_vertical" in table[0]
        assert "dominant attention pattern" in (tmp_path / files[1]).read_text()  # the classes drawn, as shaded
        await pilot.press("escape")

        screen = await open_screen(pilot, "p")
        await pilot.press("e")  # nothing yet: a notification, no file
        assert exported(tmp_path, "probing") == []
        await pilot.press("r")
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        data = json.loads(next(tmp_path.glob("bertscope-probing-*.json")).read_text())
        assert data["runs"][0]["task"] == "bigram_shift" and data["runs"][0]["layers"][3]["accuracy"] == 0.8
        await pilot.press("escape")

        screen = await open_screen(pilot, "g")
        await pilot.press("e")
        await settle(pilot)
        data = json.loads(next(tmp_path.glob("bertscope-geometry-*.json")).read_text())
        assert len(data["layers"][3]["points"]) == 12 and len(data["cka"]) == 4 and len(data["rows"]) == 12
        await pilot.press("escape")

        screen = await open_screen(pilot, "c")
        screen.query_one("#model-b").value = "tuned"
        await screen.query_one("#model-b").action_submit()
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        data = json.loads(next(tmp_path.glob("bertscope-compare-*.json")).read_text())
        assert data["model_b"] == "tuned" and data["heads"][5]["attention_cosine"] == 0.9  # head 1:1
        await pilot.press("escape")

        screen = await open_screen(pilot, "C")
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        rows = list(csv.DictReader(io.StringIO(next(tmp_path.glob("bertscope-pruning-curve-*.csv")).read_text())))
        assert [row["heads_pruned"] for row in rows] == ["0", "3", "6", "9", "12"]
        assert float(rows[1]["metric"]) == 0.85
        svgs = list(tmp_path.glob("*.svg"))
        assert len(svgs) == 6 and all("<svg" in path.read_text() for path in svgs)
        titles = {"probing": "accuracy", "geometry": "PC1", "compare": "attention in A and B", "pruning-curve": "heads pruned"}
        for name, words in titles.items():  # each screen's own figure, drawn from its result
            assert words in next(tmp_path.glob(f"bertscope-{name}-*.svg")).read_text(), name

    run(app, steps)


def test_help_scrolls_by_keyboard_at_80_by_24():
    app = make_app()

    async def steps(pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        scroll = app.screen.query_one("VerticalScroll")
        assert app.screen.focused is scroll
        await pilot.press("end")
        await pilot.pause()
        assert scroll.scroll_y == scroll.max_scroll_y > 0  # its last lines can be read

    run(app, steps, size=(80, 24))


def test_escape_in_a_box_during_a_run_leaves_the_box_and_a_second_escape_cancels():
    from tests.fake_backend import FakeBackend

    app = make_app(FakeBackend(delay=0.05))

    async def steps(pilot):
        await pilot.press("g")
        await pilot.pause(0.2)
        screen = app.screen
        await pilot.press("slash")
        assert isinstance(screen.focused, Input) and screen.running
        await pilot.press("escape")
        assert isinstance(screen.focused, Scatter) and screen.running  # only the box was left
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, GeometryScreen) and not screen.running
        assert "cancelled" in rendered(screen.query_one(".progress-text"))

    run(app, steps)


def test_every_screen_shows_and_takes_the_help_key_at_80_columns():
    """`? help` comes second in every screen's footer (after escape), so 80 columns never cut it off, and it opens
    the help over that screen; escape comes back to it."""
    app = make_app()

    async def steps(pilot):
        for key, screen in (("o", "OverviewScreen"), ("p", "ProbingScreen"), ("g", "GeometryScreen")):
            await pilot.press(key)
            await settle(pilot)
            assert type(app.screen).__name__ == screen
            shown = [binding.key for binding in app.screen.BINDINGS if binding.show][:2]
            assert shown == ["escape", "question_mark"], screen
            await pilot.press("question_mark")
            await pilot.pause()
            assert type(app.screen).__name__ == "HelpScreen"
            await pilot.press("escape")
            await pilot.pause()
            assert type(app.screen).__name__ == screen
            await pilot.press("escape")
            await settle(pilot)
            assert type(app.screen).__name__ == "MainScreen"

    run(app, steps, size=(80, 24))


def test_a_notification_keeps_the_tokens_it_names():
    """Markup would read "[CLS]" as a tag and show "targets ," (a QA objective's note did)."""
    app = make_app()

    async def steps(pilot):
        await settle(pilot)
        app.main_screen.notify("unanswerable questions target [CLS] as run_qa does")
        await settle(pilot)
        (note,) = [note for note in app._notifications if "run_qa" in str(note.message)]
        assert note.message == "unanswerable questions target [CLS] as run_qa does" and not note.markup  # shown as written

    run(app, steps)
