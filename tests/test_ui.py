"""The explorer driven by Textual's pilot, on a fake backend (no torch in this process's UI)."""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from bertscope.base.errors import ModelLoadError
from bertscope.ui.app import ExplorerApp
from bertscope.ui.probing import TREEBANK_SENTENCES
from bertscope.ui.widgets.attention_view import AttentionView
from bertscope.ui.widgets.head_grid import HeadGrid
from bertscope.ui.widgets.panels import EffectPanel, StatusLine, TokenPanel
from tests.fake_backend import FakeBackend
from tests.helpers.ui import heatmap_text, make_app, overview_of, rendered, run, settle


def test_opens_on_the_sentence_and_shows_layer_0_head_0():
    app = make_app()

    async def steps(pilot):
        assert app.backend is app.fake
        assert "layer 0 · head 0" in heatmap_text(app)
        assert "fake-bert" in rendered(app.query_one(StatusLine)) and "3×4 heads" in rendered(app.query_one(StatusLine))
        assert app.fake.calls == [("the cat sat on the mat", "")]
        assert app.main_screen.analysis.current.tokens[1:3] == ("the", "cat")

    run(app, steps)


def test_moving_between_heads_repaints_from_memory():
    app = make_app()

    async def steps(pilot):
        await pilot.press("right", "down")
        await pilot.pause()
        assert (app.state.layer, app.state.head) == (1, 1)
        assert "layer 1 · head 1" in heatmap_text(app)
        assert len(app.fake.calls) == 1  # no new forward pass

    run(app, steps)


def test_space_switches_a_head_off_and_shows_the_effect():
    app = make_app()

    async def steps(pilot):
        await pilot.press("right", "space")
        await settle(pilot)
        assert app.state.mask == "0:1"
        assert app.fake.calls[-1] == ("the cat sat on the mat", "0:1")
        assert len(app.fake.calls) == 2  # the unmasked run is reused
        assert "head 1 · before masking (masked)" in heatmap_text(app)
        effect = rendered(app.query_one(EffectPanel))
        assert "1 head(s) off" in effect and "layer 0" in effect
        assert "×" in rendered(app.query_one(HeadGrid))
        assert app.main_screen.analysis.cosines[0] == pytest.approx(1.0) and app.main_screen.analysis.cosines[1] < 1.0
        await pilot.press("space")
        await settle(pilot)
        assert app.state.mask == "" and "no heads masked" in rendered(app.query_one(EffectPanel))

    run(app, steps)


def test_layer_toggle_and_unmask_all():
    app = make_app()

    async def steps(pilot):
        await pilot.press("down", "l")
        await settle(pilot)
        assert app.state.mask == "1:*"
        await pilot.press("x")
        await settle(pilot)
        assert app.state.mask == ""

    run(app, steps)


def test_typing_a_new_sentence_recomputes():
    app = make_app()

    async def steps(pilot):
        await pilot.press("slash")
        app.query_one("#sentence").value = ""
        await pilot.press(*"a dog barked", "enter")
        await settle(pilot)
        assert app.main_screen.analysis.current.tokens == ("[CLS]", "a", "dog", "barked", "[SEP]")
        assert app.state.text == "a dog barked"

    run(app, steps)


def test_empty_sentence_is_a_notification_not_a_crash():
    app = make_app()

    async def steps(pilot):
        await pilot.press("slash")
        app.query_one("#sentence").value = "   "
        await pilot.press("enter")
        await settle(pilot)
        assert any("empty" in n.message for n in app._notifications)
        assert app.main_screen.analysis.current.tokens[1] == "the"  # the old result stays

    run(app, steps)


def test_cancel_a_running_computation():
    backend = FakeBackend()
    app = make_app(backend)

    async def steps(pilot):
        backend.release.clear()  # the next forward pass hangs until released
        await pilot.press("space")
        await pilot.pause(0.1)
        assert app.query_one(StatusLine).busy
        await pilot.press("escape")
        await pilot.pause()
        assert not app.query_one(StatusLine).busy
        assert any("cancelled" in n.message for n in app._notifications)
        backend.release.set()
        await settle(pilot)
        assert len(app.main_screen.analysis.current.mask) == 0  # the cancelled result never shows

    run(app, steps)


def test_a_newer_request_wins_over_a_slower_older_one():
    backend = FakeBackend(delay=0.2)
    app = make_app(backend)

    async def steps(pilot):
        await pilot.press("space", "right", "space")
        await settle(pilot)
        assert app.state.mask == "0:0,0:1"
        assert app.main_screen.analysis.current.mask.spec() == "0:0,0:1"

    run(app, steps)


def test_views_figures_and_ablation():
    app = make_app()

    async def steps(pilot):
        await pilot.press("v")
        assert "mean of 4 heads" in heatmap_text(app)
        await pilot.press("v", "f")
        assert app.state.figure == "cls" and "attn to [CLS]" in rendered(app.query_one(HeadGrid))
        await pilot.press("space", "a")
        await settle(pilot)
        assert app.state.ablation == "uniform" and app.fake.calls[-1][1] == "0:0"
        assert app.main_screen.analysis.current.ablation == "uniform"

    run(app, steps)


def test_heatmap_cursor_and_token_panel():
    app = make_app()

    async def steps(pilot):
        app.query_one(AttentionView).focus()
        await pilot.press("down", "down", "right")
        await pilot.pause()
        assert app.state.cursor == (2, 1)
        assert "2:cat → 1:the" in heatmap_text(app)
        assert "2:cat attends to" in str(app.query_one(TokenPanel).border_title)

    run(app, steps)


def test_switch_theme_recolours_the_heatmap():
    app = make_app(theme="dark")

    async def steps(pilot):
        before = app.query_one(HeadGrid).colormap
        await pilot.press("t")
        await pilot.pause()
        assert app.theme == "light" and app.state.theme == "light"
        assert app.query_one(HeadGrid).colormap != before
        assert app.query_one(HeadGrid).colormap == app.theme_specs["light"].heatmap

    run(app, steps)


def test_export_writes_the_views_figure_and_csv_without_overwriting(tmp_path):
    app = make_app(export_dir=tmp_path)

    async def steps(pilot):
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        svgs, csvs = sorted(tmp_path.glob("*.svg")), sorted(tmp_path.glob("*.csv"))
        assert len(svgs) == 2 and len(csvs) == 2
        figure = svgs[0].read_text()
        assert "<svg" in figure and "layer 0 · head 0" in figure and "attention weight α" in figure  # a figure, not the terminal
        assert all(f">{token}<" in figure for token in ("[CLS]", "cat", "mat"))  # every token, kept as text
        rows = list(csv.reader(csvs[0].open()))
        assert rows[0][1:] == list(app.main_screen.analysis.current.tokens)
        np.testing.assert_allclose(
            [[float(v) for v in row[1:]] for row in rows[1:]], app.main_screen.analysis.current.attentions[0, 0], atol=1e-6
        )
        assert any(str(svgs[0].name) in n.message or "exported" in (n.title or "") for n in app._notifications)

    run(app, steps)


def test_session_file_round_trip(tmp_path):
    session = tmp_path / "session.json"
    app = make_app(session_file=session)

    async def steps(pilot):
        await pilot.press("down", "right", "space", "v")
        await settle(pilot)

    run(app, steps)
    saved = json.loads(session.read_text())
    assert saved["mask"] == "1:1" and saved["layer"] == 1 and saved["view"] == "average"

    again = ExplorerApp(lambda report: FakeBackend(), session_file=session)

    async def check(pilot):
        assert again.state.text == "the cat sat on the mat"
        assert (again.state.layer, again.state.head, again.state.mask) == (1, 1, "1:1")
        assert again.main_screen.analysis.current.mask.spec() == "1:1"
        assert "mean of" in heatmap_text(again)

    run(again, check)


def test_damaged_session_file_gives_a_fresh_session(tmp_path):
    session = tmp_path / "session.json"
    session.write_text('{"version": 1, "layer": "two"}')
    app = ExplorerApp(lambda report: FakeBackend(), session_file=session)

    async def steps(pilot):
        assert any("damaged" in n.message for n in app._notifications)
        assert app.main_screen.analysis is not None

    run(app, steps)
    assert (tmp_path / "session.json.damaged").read_text() == '{"version": 1, "layer": "two"}'


def test_a_file_that_is_not_a_session_is_never_renamed_nor_overwritten(tmp_path):
    """The command line refuses it; an app made in Python says so and saves the session nowhere."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    app = ExplorerApp(lambda report: FakeBackend(), session_file=notes)

    async def steps(pilot):
        assert any("is not a bertscope session" in n.message and "not saved" in n.message for n in app._notifications)
        await pilot.press("space", "v")
        await settle(pilot)

    run(app, steps)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and notes.read_text() == "my notes\n"


def test_model_that_fails_to_load_closes_the_explorer_with_its_reason():
    """The explorer can do nothing without a model: it exits, and the command line prints the one line."""

    def broken(report):
        report("loading…")
        raise ModelLoadError("could not read the weights in x/model.safetensors: header too large")

    app = ExplorerApp(broken)

    async def go():
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot)
            await pilot.pause()

    asyncio.run(go())
    assert app.return_code == 2
    assert app.load_error == "could not read the weights in x/model.safetensors: header too large"


def test_unexpected_failure_is_a_notification():
    app = make_app(FakeBackend())

    async def steps(pilot):
        app.fake.fail_with = RuntimeError("CUDA out of memory")
        await pilot.press("space")
        await settle(pilot)
        assert any("CUDA out of memory" in n.message for n in app._notifications)
        assert not app.query_one(StatusLine).busy
        app.fake.fail_with = None
        await pilot.press("space")
        await settle(pilot)
        assert app.main_screen.analysis.current.mask.spec() == ""

    run(app, steps)


def test_help_screen_and_quit():
    app = make_app()

    async def steps(pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        await pilot.pause()
        assert type(app.screen).__name__ == "MainScreen"
        await pilot.press("ctrl+q")

    run(app, steps)
    assert app.return_code == 0


def test_mouse_selects_a_head():
    app = make_app()

    async def steps(pilot):
        grid = app.query_one(HeadGrid)
        # content starts after the border and one cell of padding; row 0 is the header
        await pilot.click(HeadGrid, offset=(2 + 4 + 3 * 2, 1 + 1 + 2))
        await pilot.pause()
        assert (app.state.layer, app.state.head) == (2, 2)
        assert grid.selected == (2, 2)

    run(app, steps)


def test_usable_at_80_by_24():
    app = make_app()

    async def steps(pilot):
        for widget in (HeadGrid, AttentionView, StatusLine):
            region = app.query_one(widget).region
            assert region.width > 10 and region.height > 0 and region.right <= 80 and region.bottom <= 24

    run(app, steps, size=(80, 24))


def test_no_color_uses_glyphs(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app()

    async def steps(pilot):
        assert app.glyphs
        assert "░" in heatmap_text(app) or "█" in heatmap_text(app)

    run(app, steps)


def test_ui_does_not_import_torch():
    code = "import bertscope.ui.app, bertscope.cli, sys; print(' '.join(sys.modules))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "bertscope.ui.app" in loaded
    assert "torch" not in loaded and "transformers" not in loaded


@pytest.mark.slow
def test_explorer_on_the_bundled_model(bundled_session):
    from bertscope.session_backend import SessionBackend

    app = ExplorerApp(lambda report: SessionBackend(bundled_session), text="The keys to the cabinet are on the table.")

    async def steps(pilot):
        assert app.backend.info.num_heads == 12
        assert "cabinet" in app.main_screen.analysis.current.tokens
        np.testing.assert_allclose(app.main_screen.analysis.current.attentions.sum(-1), 1.0, atol=1e-5)
        await pilot.press("down", "space")  # head 1:0 off
        await settle(pilot)
        cosines = app.main_screen.analysis.cosines
        assert app.main_screen.analysis.current.mask.spec() == "1:0"
        assert cosines[1] == pytest.approx(1.0) and cosines[2] < 0.9999  # layer 0 untouched, layer 1 moved
        assert np.all(app.main_screen.analysis.current.attentions[1, 0] == 0)

    run(app, steps)


def test_theme_file_given_by_path(tmp_path):
    from bertscope.base.theming import builtin_themes_dir

    mine = tmp_path / "mine.toml"
    mine.write_text((builtin_themes_dir() / "light.toml").read_text())
    app = make_app(theme=str(mine))

    async def steps(pilot):
        assert app.theme == "mine"
        assert app.query_one(HeadGrid).colormap == app.theme_specs["mine"].heatmap

    run(app, steps)


def test_unknown_figure_in_a_session_file(tmp_path):
    session = tmp_path / "s.json"
    session.write_text(json.dumps({"version": 1, "text": "a b c", "figure": "nonsense"}))
    app = ExplorerApp(lambda report: FakeBackend(), session_file=session)

    async def steps(pilot):
        assert app.state.figure == "entropy"
        assert any("nonsense" in n.message for n in app._notifications)

    run(app, steps)


def test_what_reading_a_corpus_skipped_comes_with_the_result_as_a_notification(tmp_path):
    """The corpus travels whole to the analysis; its notes arrive on the result, the one route to the screen."""
    corpus = tmp_path / "probe.tsv"
    corpus.write_text("tr\t0\tthe cat sat\ntr\t1\ntr\t1\ta dog barked\n")
    app = make_app()

    async def steps(pilot):
        screen = await overview_of(pilot, corpus)
        assert screen.result.sentences == 2 and not screen.running
        skipped = f"read 2 sentences; skipped 1 (first: {corpus}:2: expected 3 tab-separated fields (split, label, sentence), found 2)"
        assert [n.message for n in app._notifications].count(skipped) == 1  # once: no side route beside the result's notes

    run(app, steps)


def test_overview_runs_over_a_corpus_and_opens_a_head(tmp_path):
    from bertscope.ui.overview import OverviewScreen
    from bertscope.ui.widgets.pattern_grid import PatternGrid

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i}" for i in range(7)))
    app = make_app()

    async def steps(pilot):
        screen = await overview_of(pilot, corpus)
        assert screen.result.sentences == 7 and not screen.running
        assert "7 sentences · done" in str(screen.query_one(".progress-text").content)
        grid = screen.query_one(PatternGrid)
        assert grid.classes_of[1, 2] == 3  # the fake's head (l, h) is class (l + h) % 5
        await pilot.press("down", "right", "right")
        assert "block" in grid._legend()
        await pilot.press("f")
        assert grid.classes_of is None and "[CLS]" in grid._legend()
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, OverviewScreen)
        assert (app.state.layer, app.state.head) == (1, 2)
        assert "layer 1 · head 2" in heatmap_text(app)

    run(app, steps)


def test_the_overviews_export_says_which_mask_its_passes_ran_under(tmp_path):
    """A CSV has nowhere but its rows to say it: a run under a mask adds mask, ablation and erased columns, and the
    figure's note ends with the mask; a run of the model as it is exports the `patterns --csv` table alone. A head
    switched off is of class off (issue 54), in the grid, the table and the per-layer shares' title."""
    from bertscope.analyses.attention.patterns_results import CLASSES
    from bertscope.ui.widgets.pattern_grid import PatternGrid
    from tests.fake_backend import HEADS, LAYERS

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i}" for i in range(5)))
    app = make_app()

    async def steps(pilot):
        screen = await overview_of(pilot, corpus)
        assert screen.table().splitlines()[0].endswith(",norm_next")
        assert "mask" not in screen.figure().get_supxlabel()
        await pilot.press("escape")
        await pilot.press("space")  # head 0:0 off
        await settle(pilot)
        screen = await overview_of(pilot, corpus)
        assert "mask 0:0 (zero)" in rendered(screen.query_one(".progress-text"))
        header, *rows = screen.table().splitlines()
        assert header.endswith(",norm_next,mask,ablation,erased") and len(rows) == LAYERS * HEADS  # a row a head
        assert all(row.endswith(",0:0,zero,") for row in rows)
        assert screen.figure().get_supxlabel().endswith("tokens · mask 0:0 (zero)")
        assert rows[0].split(",")[2] == "off"  # head 0:0's class: switched off, no pattern
        grid = screen.query_one(PatternGrid)
        assert CLASSES[grid.classes_of[0, 0]] == "off" and rendered(grid).splitlines()[1].split()[:2] == ["0", "[×]"]  # selected
        assert "0:0 off" in grid._legend()
        charts = [line.rstrip() for line in rendered(screen.query_one("#charts-content")).splitlines()]
        assert "shares per layer, heads off out" in charts  # on one line, over the table of the other heads' shares
        assert "switched off (zero): no pattern" in rendered(screen.query_one("#head-details"))

    run(app, steps)


def test_overview_run_can_be_cancelled(tmp_path):
    from bertscope.ui.overview import OverviewScreen

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence {i}" for i in range(100)))
    backend = FakeBackend(delay=0.05)
    app = make_app(backend)

    async def steps(pilot):
        await pilot.press("o")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#corpus").value = str(corpus)
        await screen.query_one("#corpus").action_submit()
        await pilot.pause(0.3)
        assert screen.running
        await pilot.press("escape")
        await settle(pilot)
        assert not screen.running and isinstance(app.screen, OverviewScreen)
        assert 0 < screen.result.sentences < 100
        assert "cancelled" in str(screen.query_one(".progress-text").content)
        await pilot.press("escape")  # now it goes back
        await pilot.pause()
        assert not isinstance(app.screen, OverviewScreen)

    run(app, steps)


def test_overview_with_a_bad_corpus(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    app = make_app()

    async def steps(pilot):
        await pilot.press("o")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#corpus").value = str(bad)
        await screen.query_one("#corpus").action_submit()
        await settle(pilot)
        assert any("UTF-8" in n.message for n in app._notifications)
        assert "stopped" in str(screen.query_one(".progress-text").content)

    run(app, steps)


def test_probing_pane_runs_tasks_side_by_side_and_rescores_with_the_mask():
    from bertscope.ui.probing import ProbingScreen

    app = make_app()

    async def steps(pilot):
        await pilot.press("space")  # mask head 0:0 in the explorer
        await settle(pilot)
        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProbingScreen)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert list(screen.reports) == ["bigram_shift"]
        await pilot.press("m")
        await settle(pilot)
        assert list(screen.reports) == ["bigram_shift", "bigram_shift · mask 0:0"]
        plain, masked = screen.reports.values()
        assert masked.layers[3]["accuracy"] < plain.layers[3]["accuracy"]
        curves = rendered(screen.query_one("#curves-content"))
        assert "0.800" in curves and "0.750" in curves  # layer 3: 0.5 + 0.3, minus 0.05 for one masked head
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ProbingScreen)

    run(app, steps)


def test_d_adds_the_description_length_beside_accuracy(tmp_path):
    """Runs fit the online code too; each curve gets a compression column (a word task's control task's beside it), the
    curve drawn before `d` is fitted again with it, the export draws it."""
    from bertscope.data.corpus import sample_corpus
    from bertscope.ui.probing import ProbingScreen

    app = make_app(export_dir=tmp_path)

    async def steps(pilot):
        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProbingScreen)
        await pilot.press("r")  # accuracy alone: no codes fitted
        await settle(pilot)
        assert not screen.reports["bigram_shift"].mdl and "compression" not in rendered(screen.query_one("#curves-content"))
        await pilot.press("d")  # the curve drawn without codes is run again with them
        await settle(pilot)
        assert screen.reports["bigram_shift"].mdl and list(screen.reports) == ["bigram_shift"]
        curves = rendered(screen.query_one("#curves-content"))
        assert "compression" in curves and "—" not in curves and "4.00 *" in curves
        assert "a sentence task has no control task" in curves and "(1.75)" not in curves
        screen.query_one("#task").value = "upos"  # a word task: its control task's compression in brackets
        screen.query_one("#probe-data").value = str(sample_corpus("conllu"))
        await pilot.press("r")
        await settle(pilot)
        report = screen.reports[f"upos · {sample_corpus('conllu').name}"]
        assert report.mdl and report.layers[3]["mdl"]["compression"] == 4.0
        curves = rendered(screen.query_one("#curves-content"))
        assert "4.00 * (1.75)" in curves and "1.00 (1.00)" in curves  # layer 3, the best, and layer 0; the control's in brackets
        assert "(in brackets) the control task's" in curves
        screen.query_one("#task").value = "sentence_length"
        screen.query_one("#probe-data").value = ""
        await pilot.press("r")
        await settle(pilot)
        report = screen.reports["sentence_length"]
        assert report.mdl and report.layers[3]["mdl"]["compression"] == 4.0
        await pilot.press("e")
        await settle(pilot)
        [figure] = tmp_path.glob("bertscope-probing-*.svg")
        assert "compression" in figure.read_text() and ">accuracy</text>" in figure.read_text()  # both panels
        await pilot.press("d", "r")  # off again: runs fit no codes
        await settle(pilot)
        assert not screen.reports["sentence_length"].mdl

    run(app, steps)


def test_probing_pane_word_task_without_a_file_probes_the_generated_treebank():
    app = make_app()

    async def steps(pilot):
        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#task").value = "upos"
        await pilot.press("ctrl+r")
        await settle(pilot)
        task, sentences = app.backend.probe_calls[-1]
        assert task == "upos" and len(sentences) == TREEBANK_SENTENCES
        assert all(s.upos and s.heads and len(s.upos) == len(s.words) for s in sentences)
        assert "upos" in screen.reports and not screen.running

    run(app, steps)
