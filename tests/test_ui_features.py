"""The features screen (`F`): an SAE's features on the sentence, switched off in every pass as a head is, kept by a session."""

from __future__ import annotations

import json

import numpy as np
from textual.widgets import OptionList

from bertscope.analyses.sae.files import CONFIG_FILE, WEIGHTS_FILE, SAEConfig
from bertscope.ui.features import FeaturesScreen
from bertscope.ui.widgets.panels import EffectPanel, StatusLine
from tests.fake_backend import LAYERS, WIDTH, FakeBackend
from tests.helpers.ui import make_app, rendered, run, settle


def fake_sae(directory, width: int = WIDTH, layer: int = 1):
    """An SAE directory as the fake reads it: a real cfg.json (the weights file is not opened by the fake)."""
    directory.mkdir()
    (directory / CONFIG_FILE).write_text(json.dumps(SAEConfig(width, 4 * width, 2, layer, "fake-bert", "fake").cfg_json()))
    (directory / WEIGHTS_FILE).write_bytes(b"")
    return str(directory)


async def open_features(pilot, directory: str) -> FeaturesScreen:
    await pilot.press("F")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, FeaturesScreen)
    assert screen.focused is screen.query_one("#sae-path")  # no SAE yet: the screen asks for one
    await type_path(pilot, screen, directory)
    return screen


async def type_path(pilot, screen: FeaturesScreen, directory: str) -> None:
    if screen.focused is not screen.query_one("#sae-path"):
        await pilot.press("slash")  # `/` gives the box the keys
    screen.query_one("#sae-path").value = directory
    await pilot.press("enter")
    await settle(pilot)


def test_a_feature_switched_off_on_the_features_screen_runs_in_every_pass(tmp_path):
    app = make_app()
    directory, wide = fake_sae(tmp_path / "sae"), fake_sae(tmp_path / "wide", width=WIDTH + 4)

    async def steps(pilot):
        plain = app.main_screen.analysis.current
        screen = await open_features(pilot, str(tmp_path / "nowhere"))  # no SAE there: one line, the screen stays
        assert app.fake.sae_calls == [] and any("does not exist" in str(note.message) for note in app._notifications)
        await type_path(pilot, screen, wide)  # an SAE of another width: one line
        assert screen.sae is None and screen.rows == []
        assert any("-wide hidden states and this model's are" in str(note.message) for note in app._notifications)
        await type_path(pilot, screen, directory)
        assert app.fake.sae_calls == [directory]
        # token 0 ([CLS]) fires features 0, 5, 10 (the fake's), the first labelled by the sample treebank's reading
        assert screen.rows[:3] == [(0, 0, 3.0), (0, 5, 2.0), (0, 10, 1.0)]
        options = screen.query_one("#sae-features", OptionList)
        table = "\n".join(str(options.get_option_at_index(index).prompt) for index in range(options.option_count))
        assert (
            "#5       2.00  tokens: keys" in table and "upos:NOUN p=0.95" in table
        )  # a label, and an unlabelled feature's top token; no room kept for marks while nothing is switched
        await pilot.press("down", "enter")  # feature 5's top contexts
        await settle(pilot)
        assert "feature 5" in rendered(screen.query_one("#sae-contexts")) and "[[keys]]" in rendered(screen.query_one("#sae-contexts"))
        await pilot.press("o")  # feature 5 off in every pass
        await settle(pilot)
        assert "sae@1 off 5" in rendered(screen.query_one("#sae-switched"))
        await pilot.press("escape")
        await settle(pilot)
        main = app.main_screen
        assert main.conditions.features is not None and main.conditions.features.values == {5: None}
        assert "sae@1 off 5" in rendered(app.query_one(StatusLine)) and "sae@1 off 5" in rendered(app.query_one(EffectPanel))
        assert main.conditions.current().note().endswith(" · sae@1 off 5")
        analysis = main.analysis
        assert analysis.erasure is not None and analysis.erasure.features == main.conditions.features
        assert ("forward", main.conditions.features) in app.fake.switched
        np.testing.assert_array_equal(analysis.current.attentions[0], plain.attentions[0])  # below the SAE's hidden state
        assert not np.allclose(analysis.current.attentions[1:], plain.attentions[1:])
        await pilot.press("F")  # back on the screen: the SAE is open again, `x` switches every feature back
        await settle(pilot)
        await pilot.press("x", "escape")
        await settle(pilot)
        assert main.conditions.features is None and "sae@" not in rendered(app.query_one(StatusLine))

    run(app, steps)


def test_a_session_keeps_the_switched_features_and_a_missing_sae_is_a_notification(tmp_path):
    from bertscope.ui.app import ExplorerApp

    session = tmp_path / "session.json"
    directory = fake_sae(tmp_path / "sae", layer=LAYERS)
    app = make_app(session_file=session)

    async def steps(pilot):
        screen = await open_features(pilot, directory)
        await pilot.press("c")  # clamp the first row's feature
        await settle(pilot)
        await pilot.press(*"2.5", "enter")
        await settle(pilot)
        assert screen.features is not None and screen.features.values == {0: 2.5}

    run(app, steps)
    saved = json.loads(session.read_text())
    assert (saved["sae"], saved["switched"]) == (directory, "0=2.5")

    again = FakeBackend()
    reopened = ExplorerApp(lambda report: again, session_file=session)

    async def check(pilot):
        await settle(pilot)
        screen = reopened.main_screen
        assert screen.conditions.features is not None and screen.conditions.features.values == {0: 2.5}
        assert again.switched[0][0] == "forward" and again.switched[0][1] == screen.conditions.features  # the first pass
        assert "sae@3 clamp 0=2.5" in rendered(reopened.query_one(StatusLine))

    run(reopened, check)

    (tmp_path / "sae" / CONFIG_FILE).unlink()  # the SAE is gone: a notification, the rest of the session as it was
    gone = FakeBackend()
    third = ExplorerApp(lambda report: gone, session_file=session)

    async def missing(pilot):
        await settle(pilot)
        screen = third.main_screen
        assert screen.conditions.features is None and gone.switched == []
        assert any("SAE features are not switched" in str(note.message) for note in third._notifications)
        assert third.state.sae == directory and third.state.text == json.loads(session.read_text())["text"]

    run(third, missing)
