"""The explorer on every family (issue 30): the real backend over each tiny model of tests/family_models.py, driven as a
person drives it. What it shows is held to independent references elsewhere; here, that every screen opens and runs."""

from __future__ import annotations

import numpy as np
import pytest

import bertscope
from bertscope.session_backend import SessionBackend
from bertscope.ui.geometry import GeometryScreen
from bertscope.ui.overview import OverviewScreen
from bertscope.ui.widgets.head_grid import HeadGrid
from tests.family_models import FAMILIES, save_tiny_family
from tests.helpers.ui import heatmap_text, make_app, rendered, run, settle


@pytest.mark.parametrize("family", FAMILIES)
def test_every_screen_of_the_explorer_opens_on_every_family(family, tmp_path):
    session = bertscope.load(str(save_tiny_family(tmp_path / family, family, "ForMaskedLM", seed=2)), device="cpu")
    app = make_app(SessionBackend(session), text="The keys to the cabinet are on the table.")
    failures = []
    app.notify = lambda message, **options: failures.append(message) if options.get("severity") == "error" else None

    async def steps(pilot):
        assert app.main_screen.analysis is not None and "layer 0 · head 0" in heatmap_text(app)
        await pilot.press("down", "space")  # head 1:0 off
        await settle(pilot)
        assert app.main_screen.analysis.current.mask.spec() == "1:0" and np.all(app.main_screen.analysis.current.attentions[1, 0] == 0)
        await pilot.press("v", "n", "n", "n")  # the layer view's ALTI of the masked model (the decomposition value zeroing shares)
        await settle(pilot)
        alti = app.main_screen.analysis.mixing["alti"]
        assert alti.mask.spec() == "1:0" and np.allclose(alti.per_layer.sum(-1), 1.0) and "ALTI" in heatmap_text(app)
        await pilot.press("n", "n", "n", "v")  # back to the weights of one head
        await pilot.press("E")  # UPOS erased from hidden state 1, fitted on the generated treebank
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot)
        await settle(pilot)
        erased = app.main_screen.analysis
        assert erased.erasure is not None and erased.erasure.layer == 1 and "upos erased @1" in rendered(app.query_one("#effect"))
        hidden, plain = erased.current.hidden_states, erased.plain.hidden_states  # hidden state 1 is below the masked head
        assert np.allclose(hidden[0], plain[0], atol=1e-5) and not np.allclose(hidden[1], plain[1], atol=1e-4)
        await pilot.press("E")
        await settle(pilot)
        await pilot.press("i")  # head importance for the MLM objective over the sample corpus
        await settle(pilot)
        assert "importance (mlm)" in rendered(app.query_one(HeadGrid))
        await pilot.press("o")  # the overview: pattern statistics over the sample corpus
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen) and app.screen.result is not None and app.screen.result.sentences > 0
        await pilot.press("escape", "escape")
        await pilot.pause()
        await pilot.press("g")  # geometry over the generated treebank
        await settle(pilot)
        assert isinstance(app.screen, GeometryScreen) and app.screen.result is not None
        assert failures == [], failures

    run(app, steps)


@pytest.mark.parametrize("family, marker", [("modernbert", "Ġ"), ("albert", "▁")])
def test_the_explorer_labels_tokens_by_their_text_not_the_tokenizer_s_marks(family, marker, tmp_path):
    """RoBERTa-like `Ġkeys` and XLM-R-like `▁keys` read `keys`, a word's later pieces `##`, as BERT's do."""
    from bertscope.ui.widgets.panels import TokenPanel

    session = bertscope.load(str(save_tiny_family(tmp_path / family, family, "ForMaskedLM", seed=2)), device="cpu")
    app = make_app(SessionBackend(session), text="The keys to the cabinet are on the table.")

    async def steps(pilot):
        assert any(token.startswith(marker) for token in app.main_screen.analysis.current.tokens)
        await pilot.press("tab", "tab", "down", "down")  # the heatmap's cursor on the row of "keys"
        await settle(pilot)
        panel = app.query_one(TokenPanel)
        shown = heatmap_text(app) + rendered(panel) + str(panel.border_title)
        assert f"{marker}k" not in shown and f"{marker}t" not in shown and "##keys" not in shown, shown  # a mark alone, ▁, shows
        assert "2:keys attends to" in str(panel.border_title) and "keys" in heatmap_text(app)

    run(app, steps)
