"""The patching screen (`X`) on the fake backend: type a corrupted sentence, see the effects, open a head."""

from __future__ import annotations

import json

import pytest

from bertscope.ui.patching import EffectGrid, PatchingScreen, compact_positions, metrics_for, parse_argument
from tests.fake_backend import FakeBackend
from tests.helpers.ui import heatmap_text, make_app, rendered, run, settle

CLEAN = "the keys to the cabinet are on the table"
CORRUPT = "the key to the cabinet is on the table"


def console_text(renderable) -> str:
    from rich.console import Console

    console = Console(width=120, record=True, color_system=None, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


async def open_patching(pilot) -> PatchingScreen:
    await pilot.press("X")
    await settle(pilot)
    assert isinstance(pilot.app.screen, PatchingScreen)
    return pilot.app.screen


async def type_corrupted(pilot, screen: PatchingScreen, text: str = CORRUPT) -> None:
    await pilot.press("slash")
    box = screen.query_one("#patch-corrupt")
    assert screen.focused is box and box.value == CLEAN  # prefilled with the clean sentence: one word to change
    box.value = text
    await pilot.press("enter")
    await settle(pilot)


def test_a_corrupted_sentence_shades_the_heads_and_enter_opens_one():
    app = make_app(text=CLEAN, glyphs=False)

    async def steps(pilot):
        screen = await open_patching(pilot)
        assert isinstance(screen.focused, EffectGrid)  # keys are commands until `/` chooses the box
        assert "no run yet" in rendered(screen.query_one(EffectGrid))
        assert "metric preserve" in rendered(screen.query_one("#patch-settings"))
        assert not screen.query_one("#patch-argument").display  # preserve needs nothing more
        await type_corrupted(pilot, screen)
        call = app.fake.patch_calls[-1]
        assert (call["clean"], call["corrupt"], call["metric"], call["direction"]) == (CLEAN, CORRUPT, "preserve", "denoise")
        grid = screen.query_one(EffectGrid)
        assert screen.focused is grid and grid.values[2, 1] == 0.75 and grid.value_range == (-1.0, 1.0)
        assert "keys→key, are→is" in rendered(screen.query_one(".progress-text"))
        await pilot.press("down", "down", "right")  # head 2:1, the largest effect
        assert "head 2:1        +0.75" in rendered(screen.query_one("#patch-head"))
        assert "L2 attention    +0.30" in rendered(screen.query_one("#patch-head"))
        charts = rendered(screen.query_one("#patch-charts"))
        assert "m(clean) 0 · m(corrupt) -4" in charts and "minus the squared distance" in charts
        assert "feed-forward" in charts and "-0.15" in charts  # layer 2's feed-forward write
        assert "keys" in charts and "effect:" in charts
        await pilot.press("X")  # the main screen's key: no second patching screen on top
        assert app.screen is screen and len(app.screen_stack) == 2
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, PatchingScreen)
        assert (app.state.layer, app.state.head) == (2, 1) and "layer 2 · head 1" in heatmap_text(app)

    run(app, steps)


def test_the_cell_colours_diverge_around_zero():
    """Red where a head carries the difference, blue where it works against it, white at 0."""
    app = make_app(text=CLEAN, glyphs=False)

    async def steps(pilot):
        screen = await open_patching(pilot)
        await type_corrupted(pilot, screen)
        grid = screen.query_one(EffectGrid)
        grid.selected = (2, 3)  # away from the cells read below
        line = grid.render().split("\n")[1]  # layer 0: -0.25, 0, +0.25, +0.5
        backgrounds = [span.style.bgcolor.triplet for span in line.spans if span.end > 4]
        assert backgrounds[0].blue > backgrounds[0].red  # -0.25: blue
        assert backgrounds[1] == (255, 255, 255)  # 0: white
        assert backgrounds[2].red > backgrounds[2].blue and backgrounds[3].green < backgrounds[2].green  # +0.5 redder than +0.25

    run(app, steps)


def test_probe_metric_takes_a_task_and_direction_switches():
    app = make_app(text=CLEAN)

    async def steps(pilot):
        screen = await open_patching(pilot)
        await pilot.press("m")  # preserve → probe
        box = screen.query_one("#patch-argument")
        assert screen.metric == "probe" and box.display and box.value == "subject_number"
        await pilot.press("d")
        assert screen.direction == "noise" and "direction noise" in rendered(screen.query_one("#patch-settings"))
        await type_corrupted(pilot, screen)
        call = app.fake.patch_calls[-1]
        assert (call["metric"], call["task"], call["classes"], call["direction"]) == ("probe", "subject_number", None, "noise")
        assert "subject_number probe" in rendered(screen.query_one("#patch-charts"))
        box.value = "nonsense_task"
        await pilot.press("r")
        await settle(pilot)
        assert len(app.fake.patch_calls) == 1  # refused before running
        assert any("unknown task 'nonsense_task'" in n.message for n in app._notifications)

    run(app, steps)


def test_metrics_follow_the_model():
    info = FakeBackend().info
    assert metrics_for(info) == ["preserve", "probe", "mlm"]  # the fake has an MLM head, no classifier
    assert metrics_for(type(info)(**{**info.__dict__, "has_mlm_head": False, "num_labels": 2})) == ["preserve", "probe", "class"]
    assert parse_argument("mlm", "is, are") == (None, ("is", "are"), None)
    assert parse_argument("probe", "subject_number NN,NNS") == ("subject_number", None, ("NN", "NNS"))
    assert parse_argument("mlm", "") == (None, None, None)  # the top guesses


def test_different_token_counts_are_a_notification_and_the_screen_stays():
    app = make_app(text=CLEAN)

    async def steps(pilot):
        screen = await open_patching(pilot)
        await type_corrupted(pilot, screen, "the key to the big cabinet is on the table")
        assert app.screen is screen and screen.result is None
        assert any("have 11 and 12 tokens" in n.message for n in app._notifications)
        assert "stopped: the clean and corrupted inputs have 11 and 12 tokens" in rendered(screen.query_one(".progress-text"))

    run(app, steps)


def test_escape_cancels_a_slow_run_then_goes_back():
    app = make_app(FakeBackend(delay=0.05), text=CLEAN)

    async def steps(pilot):
        screen = await open_patching(pilot)
        app.fake.release.clear()  # hold the run at its first step
        await pilot.press("slash")
        screen.query_one("#patch-corrupt").value = CORRUPT
        await pilot.press("enter")
        await pilot.pause()
        assert screen.job.running
        await pilot.press("escape")
        assert not screen.job.running and "cancelled" in rendered(screen.query_one(".progress-text"))
        app.fake.release.set()
        await settle(pilot)
        assert screen.result is None and app.screen is screen  # what the cancelled run still sent is dropped
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, PatchingScreen)

    run(app, steps)


def test_the_result_is_kept_and_exported(tmp_path):
    app = make_app(text=CLEAN, export_dir=tmp_path)

    async def steps(pilot):
        screen = await open_patching(pilot)
        await pilot.press("e")
        assert list(tmp_path.iterdir()) == []  # nothing yet: a notification
        await type_corrupted(pilot, screen)
        await pilot.press("e")
        await settle(pilot)
        data = json.loads(next(tmp_path.glob("bertscope-patching-*.json")).read_text())
        assert data["model"] == "fake-bert" and data["differing_positions"] == [2, 6] and data["clean_metric"] == 0.0
        assert {"layer": 2, "head": 1, "effect": 0.75} in data["heads"]
        assert {"layer": 0, "position": 2, "token": "keys", "effect": 0.5} in data["positions"]
        assert "effect" in next(tmp_path.glob("bertscope-patching-*.svg")).read_text()  # the heads' effects, drawn
        await pilot.press("down", "right")  # head 1:1
        await pilot.press("escape")
        await settle(pilot)
        again = await open_patching(pilot)
        assert again is not screen and again.result is screen.result and len(app.fake.patch_calls) == 1
        assert again.query_one(EffectGrid).selected == (1, 1) and "head 1:1" in rendered(again.query_one("#patch-head"))
        assert again.query_one("#patch-corrupt").value == CORRUPT
        assert "kept from before" in rendered(again.query_one(".progress-text"))
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("slash")
        app.query_one("#sentence").value = "the dogs in the garden are asleep"
        await pilot.press("enter")
        await settle(pilot)
        other = await open_patching(pilot)  # another clean sentence: the old result does not belong to it
        assert other.result is None and other.query_one("#patch-corrupt").value == "the dogs in the garden are asleep"
        assert "no run yet" in rendered(other.query_one(EffectGrid))

    run(app, steps)


@pytest.mark.slow
def test_patching_screen_on_the_bundled_model(bundled_session):
    """The worked example through SessionBackend: the residual stream at the last layer shares out the whole difference."""
    from bertscope.session_backend import SessionBackend
    from bertscope.ui.app import ExplorerApp

    app = ExplorerApp(lambda report: SessionBackend(bundled_session), text="The keys to the cabinet are on the table.")

    async def steps(pilot):
        screen = await open_patching(pilot)
        await pilot.press("slash")
        screen.query_one("#patch-corrupt").value = "The key to the cabinet is on the table."
        await pilot.press("enter")
        await settle(pilot)
        result = screen.result
        assert result is not None and result.heads.shape == (6, 12) and result.positions.shape == (7, 12)
        assert [result.tokens[i] for i in result.differing] == ["keys", "are"]
        assert result.positions[-1].sum() == pytest.approx(1.0, abs=1e-3)  # preserve: per-position effects at the output add to 1
        assert result.positions[0, list(result.differing)].sum() > 0.9  # the embeddings of the changed words carry it
        assert "keys→key, are→is" in rendered(screen.query_one(".progress-text"))
        screen.query_one("#patch-corrupt").value = "The key to the big cabinet is on the table."
        await screen.query_one("#patch-corrupt").action_submit()
        await settle(pilot)
        assert any("have 12 and 13 tokens" in n.message for n in app._notifications) and screen.result is result

    run(app, steps)


def test_without_colour_the_effects_are_signs_and_shades():
    app = make_app(text=CLEAN, glyphs=True)

    async def steps(pilot):
        screen = await open_patching(pilot)
        await type_corrupted(pilot, screen)
        grid = rendered(screen.query_one(EffectGrid)).splitlines()
        assert grid[1].startswith("  0 [░]+  +░ +▒ ")  # 0:0 chosen (-0.25), then 0, +0.25, +0.5
        assert grid[3].startswith("  2 +▒ +▓ −░ +  ")  # +0.5, +0.75, -0.25, 0
        compact = console_text(compact_positions(screen.result.positions, screen.result.tokens, {2, 6}, glyphs=True))
        assert " 2*keys   +▒ +░ +░ +  " in compact  # 0.5, 0.33, 0.17, 0 at the first differing token (five shades)
        assert "10 [SEP]  +  +░ +▓ +█ " in compact

    run(app, steps, size=(80, 24))


def test_a_pair_gets_its_own_corrupted_box():
    app = make_app(text=CLEAN, pair="they are here")

    async def steps(pilot):
        screen = await open_patching(pilot)
        assert "‖ they are here" in rendered(screen.query_one("#patch-clean"))
        box = screen.query_one("#patch-corrupt-pair")
        assert box.value == "they are here"
        box.value = "they is here"
        await type_corrupted(pilot, screen, CLEAN)  # the first segment unchanged, the second corrupted
        call = app.fake.patch_calls[-1]
        assert (call["clean_pair"], call["corrupt"], call["corrupt_pair"]) == ("they are here", CLEAN, "they is here")
        assert screen.result.differing == (12,) and "are→is" in rendered(screen.query_one(".progress-text"))
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("space")  # head 0:0 off in the explorer
        await settle(pilot)
        await open_patching(pilot)
        assert any("the mask here (0:0) does not apply there" in n.message for n in app._notifications)

    run(app, steps)
