"""Erasing a property in the explorer (`E`): fitted once, then every pass of the main view runs with it, as with a mask."""

from __future__ import annotations

import numpy as np

from bertscope.ui.erasure import EraseScreen
from bertscope.ui.widgets.attention_view import AttentionView
from bertscope.ui.widgets.panels import EffectPanel, StatusLine
from tests.fake_backend import FakeBackend
from tests.helpers.ui import erase, heatmap_text, make_app, rendered, run, settle


def test_an_erased_property_changes_the_layers_from_its_state_up_and_the_effect_pane():
    app = make_app()

    async def steps(pilot):
        plain = app.main_screen.analysis.current
        await erase(pilot, "upos", 1)
        fake, screen = app.fake, app.main_screen
        assert fake.erasure_calls == [("upos", 1, 1000)]  # fitted on the generated treebank, as the probing pane probes it
        analysis = screen.analysis
        assert analysis.erasure is not None and analysis.erasure.layer == 1
        np.testing.assert_array_equal(analysis.current.attentions[0], plain.attentions[0])  # layer 0 reads the embeddings
        assert not np.allclose(analysis.current.attentions[1:], plain.attentions[1:])
        np.testing.assert_array_equal(analysis.plain.attentions, plain.attentions)  # the model as it is, to compare with
        effect = rendered(app.query_one(EffectPanel))
        assert "upos erased @1 · output cosine" in effect and "no heads masked" not in effect
        assert "upos erased @1" in rendered(app.query_one(StatusLine))
        assert "erased" not in heatmap_text(app).splitlines()[0]  # layer 0 is below the erasure
        await pilot.press("down")  # layer 1
        await settle(pilot)
        assert "layer 1 · head 0 · upos erased" in heatmap_text(app)
        np.testing.assert_array_equal(app.query_one(AttentionView).weights, analysis.current.attentions[1, 0])
        await pilot.press("space")  # a mask composes with it
        await settle(pilot)
        assert "1 off + upos erased @1 · cos" in rendered(app.query_one(EffectPanel))
        assert screen.analysis.erasure == analysis.erasure and fake.calls[-1][1] == "1:0"
        await pilot.press("E")  # taken away: the passes run as they are, under the mask alone
        await settle(pilot)
        assert screen.conditions.erasure is None and screen.analysis.erasure is None
        assert "erased" not in rendered(app.query_one(StatusLine))
        assert len(fake.erasure_calls) == 1

    run(app, steps)


def test_mixing_attribution_and_the_probing_panes_m_run_with_the_erasure():
    app = make_app(text="the capital of france is [mask]")

    async def steps(pilot):
        await erase(pilot, "subject_number", 2)
        erasure = app.main_screen.conditions.erasure
        await pilot.press("v", "n", "n")  # the layer view's value zeroing
        await settle(pilot)
        await pilot.press("b")  # attribution on
        await settle(pilot)
        assert ("mixing", erasure) in app.fake.erased and ("attribute", erasure) in app.fake.erased
        await pilot.press("p")
        await pilot.pause()
        await pilot.press("r", "m")
        await settle(pilot)
        screen = app.screen
        assert list(screen.reports) == ["bigram_shift", "bigram_shift · subject_number erased @2"]
        plain, erased = screen.reports.values()
        assert erased.layers[3]["accuracy"] == plain.layers[3]["accuracy"] - 0.1
        assert app.fake.erased[-1] == ("probe", erasure)

    run(app, steps)


def test_the_dialog_refuses_a_state_outside_the_model_and_escape_cancels_a_fit():
    backend = FakeBackend()
    app = make_app(backend)

    async def steps(pilot):
        await settle(pilot)
        await pilot.press("E")
        await pilot.pause()
        app.screen.query_one("#erase-layer").value = "9"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, EraseScreen)  # still asking
        assert any("not a hidden state here; give 0 (embeddings) to 3" in str(note.message) for note in app._notifications)
        backend.delay = 0.5
        app.screen.query_one("#erase-layer").value = "3"
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert "fitting" in rendered(app.query_one(StatusLine))
        await pilot.press("escape")
        await settle(pilot)
        assert app.main_screen.conditions.erasure is None and app.main_screen.analysis.erasure is None
        assert "fitting" not in rendered(app.query_one(StatusLine))

    run(app, steps)


def test_the_dialog_offers_classification_tasks_and_a_failed_fit_is_a_notification():
    app = make_app()

    async def steps(pilot):
        await settle(pilot)
        await pilot.press("E")
        await pilot.pause()
        options = [value for _label, value in app.screen.query_one("#erase-task")._options]
        assert "upos" in options and "depth" not in options  # LEACE takes classes: the structural probes are not offered
        app.fake.fit_erasure = lambda *args, **kwargs: (_ for _ in ()).throw(ValueError("boom"))
        await pilot.press("enter")
        await settle(pilot)
        assert any("boom" in str(note.message) for note in app._notifications)
        assert app.main_screen.conditions.erasure is None

    run(app, steps)


def test_the_overview_its_syntax_geometry_and_the_syntax_figure_run_with_the_erasure_as_with_a_mask():
    from bertscope.data.corpus import sample_corpus
    from bertscope.ui.syntax import SyntaxPanel
    from tests.helpers.ui import overview_of

    app = make_app()

    async def steps(pilot):
        await erase(pilot, "upos", 1)
        erasure, fake = app.main_screen.conditions.erasure, app.fake
        await pilot.press("y")  # the grid's syntax figure: its treebank run under the erasure, and it says so
        await settle(pilot)
        assert fake.erased[-1] == ("syntax", erasure) and "upos erased @1" in rendered(app.query_one(SyntaxPanel))
        screen = await overview_of(pilot, sample_corpus("conllu"))
        assert set(fake.erased[-2:]) == {("patterns", erasure), ("syntax", erasure)}  # its two runs, side by side
        assert "164 sentences · done · upos erased @1" in rendered(screen.query_one(".progress-text"))
        header, first = screen.table().splitlines()[:2]  # `e`'s CSV says on every row what the passes ran under
        assert header.endswith(",norm_next,mask,ablation,erased") and first.endswith(",,,upos@1")
        assert "upos erased @1" in screen.figure().get_supxlabel()
        await pilot.press("escape")
        await pilot.press("g")  # geometry on the generated treebank
        await settle(pilot)
        assert fake.erased[-1] == ("geometry", erasure)
        assert rendered(app.screen.query_one(".progress-text")).rstrip().endswith("upos erased @1")
        assert app.screen.export_data()["erased"] == {"task": "upos", "layer": 1, "rank": erasure.rank, "sentences": 1000}
        await pilot.press("escape")
        await pilot.press("o")  # the overview's run is kept, with what it ran under
        await pilot.pause()
        assert "kept from before (r runs again) · upos erased @1" in rendered(app.screen.query_one(".progress-text"))
        await pilot.press("escape")
        calls, erased_runs = len(fake.syntax_calls), len(fake.erased)
        await pilot.press("E")  # taken away: the syntax figure runs again as the model is
        await settle(pilot)
        assert len(fake.syntax_calls) == calls + 1 and len(fake.erased) == erased_runs  # one more run, not erased
        assert "erased" not in rendered(app.query_one(SyntaxPanel))
        await pilot.press("g")
        await pilot.press("r")
        await settle(pilot)
        assert "erased" not in app.screen.export_data() and "erased" not in rendered(app.screen.query_one(".progress-text"))

    run(app, steps)


def test_a_session_file_keeps_the_erasure_and_reopening_fits_it_again(tmp_path):
    import json

    from bertscope.ui.app import ExplorerApp

    session = tmp_path / "session.json"
    app = make_app(session_file=session)

    async def steps(pilot):
        await erase(pilot, "upos", 2)

    run(app, steps)
    assert json.loads(session.read_text())["erased"] == "upos@2"
    again = FakeBackend()
    reopened = ExplorerApp(lambda report: again, session_file=session)

    async def check(pilot):
        await settle(pilot)
        await settle(pilot)
        assert again.erasure_calls == [("upos", 2, 1000)]
        screen = reopened.main_screen
        assert screen.conditions.erasure is not None and (screen.conditions.erasure.task, screen.conditions.erasure.layer) == ("upos", 2)
        assert screen.analysis.erasure == screen.conditions.live  # the pass ran with what the conditions hold
        assert any("erasing upos at hidden state 2 again" in str(note.message) for note in reopened._notifications)
        await pilot.press("E")  # taken away: the session forgets it
        await settle(pilot)

    run(reopened, check)
    assert json.loads(session.read_text())["erased"] == ""


def test_a_saved_erasure_that_does_not_fit_the_model_is_a_warning_and_nothing_is_erased(tmp_path):
    import json

    from bertscope.ui.app import ExplorerApp

    session = tmp_path / "session.json"
    session.write_text(json.dumps({"version": 1, "text": "a b c", "erased": "upos@9"}))
    backend = FakeBackend()
    app = ExplorerApp(lambda report: backend, session_file=session)

    async def steps(pilot):
        await settle(pilot)
        assert backend.erasure_calls == [] and app.main_screen.conditions.erasure is None
        assert any("the saved erasure upos@9 is not a task@layer" in str(note.message) for note in app._notifications)

    run(app, steps)
    assert json.loads(session.read_text())["erased"] == ""


def test_the_objective_pane_measures_the_erasure_with_the_mask():
    from bertscope.ui.importance import ObjectivePanel

    app = make_app()

    async def steps(pilot):
        await pilot.press("i")  # head importance: the objective pane shows the objective under the mask
        await settle(pilot)
        panel = app.query_one(ObjectivePanel)
        await erase(pilot, "upos", 1)
        erasure = app.main_screen.conditions.erasure
        text = rendered(panel)
        assert "as it is 1.0000" in text and "erased   0.8000" in text and "-0.2000" in text and "upos erased @1" in text
        assert ("objective", erasure) in app.fake.erased
        await pilot.press("space")  # a head off as well
        await settle(pilot)
        assert "mask+erased 0.7500" in rendered(panel)
        await pilot.press("E")  # the erasure taken away: the mask alone
        await settle(pilot)
        text = rendered(panel)
        assert "this mask 0.9500" in text and "erased" not in text

    run(app, steps)
