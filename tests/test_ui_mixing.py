"""The explorer's context-mixing cells (`n` in the layer view): value zeroing, ALTI, rollout and flow of the sentence,
computed once per sentence and mask in a worker, cancellable, exported as drawn; the attribution row's rolled measures."""

from __future__ import annotations

import csv

import numpy as np

from bertscope.ui.widgets.attention_view import AttentionView
from bertscope.ui.widgets.panels import StatusLine, TokenPanel
from tests.fake_backend import FakeBackend
from tests.helpers.ui import heatmap_text, make_app, rendered, run, settle


async def layer_view_cells(pilot, presses: int) -> None:
    """The layer view (`v`), then `n` pressed `presses` times, and the worker's measure arrived."""
    await pilot.press("v", *["n"] * presses)
    await settle(pilot)


def test_n_in_the_layer_view_reaches_each_mixing_measure():
    app = make_app()

    async def steps(pilot):
        await pilot.press("down", "down")  # layer 2
        await layer_view_cells(pilot, 2)  # weights → norms → value zeroing
        screen, view = app.main_screen, app.query_one(AttentionView)
        mixing = screen.analysis.mixing["value-zeroing"]
        np.testing.assert_array_equal(view.weights, mixing.per_layer[2])  # the layer's own map, rows summing to 1
        np.testing.assert_allclose(view.weights.sum(-1), 1.0, atol=1e-6)
        assert "layer 2 · value zeroing" in heatmap_text(app) and "VZ" in heatmap_text(app)  # title and legend
        assert "value zeroing" in rendered(app.query_one(StatusLine))
        assert "takes most from (value zeroing)" in str(app.query_one(TokenPanel).border_title)
        for method in ("alti", "rollout", "flow"):
            await pilot.press("n")
            await settle(pilot)
            mixing = screen.analysis.mixing[method]
            expected = mixing.rolled[2] if method in ("rollout", "flow") else mixing.per_layer[2]
            np.testing.assert_array_equal(view.weights, expected)
        assert "input → layer 2 · attention flow" in heatmap_text(app)
        assert [method for method, _ in app.fake.mixing_calls] == ["value-zeroing", "alti", "rollout", "flow"]
        await pilot.press("n")  # round to the weights: the mean over the layer's heads
        await settle(pilot)
        np.testing.assert_array_equal(view.weights, screen.analysis.current.attentions[2].mean(0))
        await pilot.press("up")  # another layer: every measure is in memory already
        for _ in range(3):
            await pilot.press("n")
        await settle(pilot)
        np.testing.assert_array_equal(view.weights, screen.analysis.mixing["alti"].per_layer[1])
        assert len(app.fake.mixing_calls) == 4

    run(app, steps)


def test_one_head_shows_its_weights_and_the_measure_comes_back_in_the_layer_view():
    app = make_app()

    async def steps(pilot):
        await layer_view_cells(pilot, 3)  # ALTI
        view, screen = app.query_one(AttentionView), app.main_screen
        await pilot.press("v")  # one head: ALTI is a layer's
        await settle(pilot)
        np.testing.assert_array_equal(view.weights, screen.analysis.current.attentions[0, 0])
        assert "ALTI (layer view)" in rendered(app.query_one(StatusLine))
        await pilot.press("v")
        await settle(pilot)
        np.testing.assert_array_equal(view.weights, screen.analysis.mixing["alti"].per_layer[0])
        await pilot.press("v", "n", "n")  # in the head view `n` goes between weights and norms only
        await settle(pilot)
        np.testing.assert_array_equal(view.weights, screen.analysis.current.attentions[0, 0])

    run(app, steps)


def test_a_mask_gives_the_masked_models_measure():
    app = make_app()

    async def steps(pilot):
        await layer_view_cells(pilot, 2)
        before = app.main_screen.analysis.mixing["value-zeroing"].per_layer[0].copy()
        await pilot.press("space")  # head 0:0 off
        await settle(pilot)
        await settle(pilot)
        assert app.fake.mixing_calls[-1] == ("value-zeroing", "0:0")
        after = app.main_screen.analysis.mixing["value-zeroing"]
        assert after.mask.spec() == "0:0" and not np.allclose(after.per_layer[0], before)
        np.testing.assert_array_equal(app.query_one(AttentionView).weights, after.per_layer[0])
        assert "1 off" in heatmap_text(app)

    run(app, steps)


def test_escape_cancels_a_slow_measure_and_shows_the_weights():
    backend = FakeBackend()
    app = make_app(backend)

    async def steps(pilot):
        await settle(pilot)
        backend.delay = 0.5  # each layer of the measure takes half a second
        await pilot.press("v", "n", "n")
        await pilot.pause(0.3)
        assert "value zeroing of this sentence" in heatmap_text(app) and "escape cancels" in heatmap_text(app)
        await pilot.press("escape")
        await settle(pilot)
        screen = app.main_screen
        assert screen.heatmap_pane.cells == "weights" and "value-zeroing" not in screen.analysis.mixing
        np.testing.assert_array_equal(app.query_one(AttentionView).weights, screen.analysis.current.attentions[0].mean(0))

    run(app, steps)


def test_a_failed_measure_is_a_notification_and_the_weights_come_back():
    backend = FakeBackend()

    def broken(*_args, **_kwargs):
        raise RuntimeError("no values here")

    backend.mixing = broken  # the context-mixing analysis, as `steps` asks the fake for it
    app = make_app(backend)

    async def steps(pilot):
        await layer_view_cells(pilot, 2)
        assert any("no values here" in str(note.message) for note in app._notifications)
        assert app.main_screen.heatmap_pane.cells == "weights"
        np.testing.assert_array_equal(app.query_one(AttentionView).weights, app.main_screen.analysis.current.attentions[0].mean(0))

    run(app, steps)


def test_export_writes_the_measure_shown(tmp_path):
    app = make_app(export_dir=tmp_path)

    async def steps(pilot):
        await layer_view_cells(pilot, 5)  # flow
        await pilot.press("e")
        await settle(pilot)
        [written] = sorted(tmp_path.glob("*-flow.csv"))
        rows = list(csv.reader(written.open()))
        values = [[float(v) for v in row[1:]] for row in rows[1:]]
        np.testing.assert_allclose(values, app.main_screen.analysis.mixing["flow"].rolled[0], atol=1e-6)
        [figure] = sorted(tmp_path.glob("*-flow.svg"))
        assert "attention flow · input → layer 0" in figure.read_text()

    run(app, steps)
