"""A long input in the explorer: only the shown layer's maps are held, the others computed when the person goes there.

EVERY_LAYER_CELLS is lowered so that the fake backend's short sentences count as long; the
last test runs a tiny ModernBERT (local and global layers) through the real backend and
checks what the explorer holds against one full forward pass.
"""

from __future__ import annotations

import numpy as np
import pytest

import bertscope.ui.main_screen as main_screen_module
from bertscope.analyses.attention.headstats import head_figures
from bertscope.model.masks import HeadMask
from bertscope.ui.widgets.attention_view import AttentionView
from tests.fake_backend import FakeBackend, pattern
from tests.helpers.ui import heatmap_text, make_app, run, settle


@pytest.fixture
def long_inputs(monkeypatch):
    monkeypatch.setattr(main_screen_module, "EVERY_LAYER_CELLS", 0)


def shown(app) -> np.ndarray:
    return app.query_one(AttentionView).weights


def test_a_long_input_holds_the_shown_layers_maps_and_computes_another_when_asked(long_inputs):
    app = make_app()

    async def steps(pilot):
        analysis = app.main_screen.analysis
        length = len(analysis.current.tokens)
        assert not analysis.every_layer and analysis.current.attentions is None and analysis.current.norms is None
        assert set(analysis.layers) == {0} and app.fake.layer_calls == [(0, "", True)]
        np.testing.assert_array_equal(shown(app), pattern(0, length))
        full = FakeBackend().forward(analysis.current.encoding, attentions=True)
        for name, values in head_figures(full.attentions, full.tokens, full.encoding.special).items():
            np.testing.assert_allclose(analysis.figures[name], values, err_msg=name)  # the grid: every layer's figures
        await pilot.press("down")  # layer 1: computed now, layer 0's maps let go
        await settle(pilot)
        assert app.state.layer == 1 and set(analysis.layers) == {1}
        assert "layer 1 · head 0" in heatmap_text(app)
        np.testing.assert_array_equal(shown(app), pattern(1, length))
        await pilot.press("right")  # another head of the same layer: from memory
        await pilot.pause()
        assert len(app.fake.layer_calls) == 2
        np.testing.assert_array_equal(shown(app), pattern(2, length))

    run(app, steps)


def test_a_masked_head_of_a_long_input_shows_its_maps_before_masking_and_norms(long_inputs):
    app = make_app()

    async def steps(pilot):
        await pilot.press("down", "space")  # head 1:0 off
        await settle(pilot)
        length = len(app.main_screen.analysis.current.tokens)
        assert app.state.mask == "1:0" and app.fake.calls[-1][1] == "1:0"
        assert (1, "1:0", True) in app.fake.layer_calls and (1, "", True) in app.fake.layer_calls
        assert "before masking" in heatmap_text(app)
        np.testing.assert_array_equal(shown(app), pattern(1, length))
        await pilot.press("right")  # an unmasked head of the masked layer: under the mask
        await pilot.pause()
        np.testing.assert_array_equal(shown(app), pattern(2, length))
        await pilot.press("n")
        await pilot.pause()
        assert "‖αf‖" in heatmap_text(app)
        np.testing.assert_allclose(shown(app), pattern(2, length) * (0.5 + np.arange(length) % 4))

    run(app, steps)


def test_the_explorer_reads_a_long_modernbert_input_as_a_full_pass_would(long_inputs, tmp_path):
    """The real backend: the shown layer's maps (a local layer, under a mask) and every layer's figures equal one
    forward pass's."""
    import bertscope
    from bertscope.session_backend import SessionBackend
    from tests.family_models import save_tiny_family

    session = bertscope.load(str(save_tiny_family(tmp_path / "modernbert", "modernbert", "ForMaskedLM")), device="cpu")
    text = "The old bridge was closed because of the storm and the river flows slowly through the green valley."
    app = make_app(SessionBackend(session), text=text)

    async def steps(pilot):
        await pilot.press("down", "space", "right")  # layer 1 (local), head 1:0 off, head 1 shown
        await settle(pilot)
        analysis = app.main_screen.analysis
        assert app.state.mask == "1:0" and set(analysis.layers) == {1} and not analysis.every_layer
        full = session.forward(text, mask=HeadMask.parse("1:0", session.num_layers, session.num_heads), norms=True)
        np.testing.assert_allclose(analysis.layers[1].weights, full.attentions[1], atol=1e-6)
        np.testing.assert_allclose(analysis.layers[1].norms, full.norms[1], rtol=1e-5, atol=1e-6)
        plain = session.forward(text)
        np.testing.assert_allclose(analysis.layers[1].plain_weights, plain.attentions[1], atol=1e-6)
        for name, values in head_figures(full.attentions, full.tokens, full.encoding.special).items():
            np.testing.assert_allclose(analysis.figures[name], values, rtol=1e-5, atol=1e-6, err_msg=name)
        assert "local: sees ±4" in heatmap_text(app)

    run(app, steps)
