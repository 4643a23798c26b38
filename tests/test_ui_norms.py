"""The explorer's norms mode (`n`): the heatmap of value-weighted norms ‖αf‖, from memory, said in the legend."""

from __future__ import annotations

import csv

import numpy as np

from bertscope.ui.widgets.attention_view import AttentionView
from bertscope.ui.widgets.panels import StatusLine, TokenPanel
from tests.helpers.ui import heatmap_text, make_app, rendered, run, settle


def test_n_switches_the_heatmap_between_weights_and_norms_without_a_forward_pass():
    app = make_app()

    async def steps(pilot):
        await pilot.press("right", "down")  # layer 1, head 1
        await pilot.pause()
        calls = len(app.fake.calls)
        view = app.query_one(AttentionView)
        np.testing.assert_array_equal(view.weights, app.main_screen.analysis.current.attentions[1, 1])
        assert "‖αf‖" not in heatmap_text(app)
        await pilot.press("n")
        await pilot.pause()
        np.testing.assert_array_equal(view.weights, app.main_screen.analysis.current.norms[1, 1])
        text = heatmap_text(app)
        assert "layer 1 · head 1 · ‖αf‖" in text and "‖αf‖ max" in text  # title and the legend's scale
        assert "‖αf‖ norms" in rendered(app.query_one(StatusLine))
        assert "takes most from" in str(app.query_one(TokenPanel).border_title)
        assert len(app.fake.calls) == calls  # repainted from memory
        await pilot.press("n")
        await pilot.pause()
        np.testing.assert_array_equal(view.weights, app.main_screen.analysis.current.attentions[1, 1])
        assert "‖αf‖" not in heatmap_text(app)

    run(app, steps)


def test_norms_of_a_masked_head_and_the_fixed_scale():
    app = make_app()

    async def steps(pilot):
        await pilot.press("space", "n")  # head 0:0 off: its map before masking, as for weights
        await pilot.pause()
        await pilot.pause()
        view = app.query_one(AttentionView)
        np.testing.assert_array_equal(view.weights, app.main_screen.analysis.plain.norms[0, 0])
        assert not app.main_screen.analysis.current.norms[0, 0].any()  # what the head moves once off: nothing
        await pilot.press("s", "s")  # max → row → fixed
        await pilot.pause()
        top = max(app.main_screen.analysis.plain.norms.max(), app.main_screen.analysis.current.norms.max())
        assert "‖αf‖ fixed 0" in heatmap_text(app) and f"{top:.2f}" in heatmap_text(app)

    run(app, steps)


def test_export_in_norms_mode_writes_the_norms(tmp_path):
    app = make_app(export_dir=tmp_path)

    async def steps(pilot):
        await pilot.press("n", "e")
        await settle(pilot)  # the export is written in a worker
        [written] = sorted(tmp_path.glob("*-norms.csv"))
        rows = list(csv.reader(written.open()))
        values = [[float(v) for v in row[1:]] for row in rows[1:]]
        np.testing.assert_allclose(values, app.main_screen.analysis.current.norms[0, 0], atol=1e-6)

    run(app, steps)


def test_n_in_the_overview_shows_the_shares_of_norm(tmp_path):
    """The overview takes the norms in the same passes; `n` shades the grid, fills the head's details and draws the
    per-layer chart from the shares of ‖αf‖ instead of the weights, and back."""
    from bertscope.ui.widgets.pattern_grid import PatternGrid
    from tests.helpers.ui import overview_of

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i}" for i in range(6)))
    app = make_app()

    async def steps(pilot):
        screen = await overview_of(pilot, corpus)
        assert screen.result.has_norms
        header, first = screen.table().splitlines()[:2]  # what `e` exports: the shares of norm beside the weights'
        assert header.endswith("norm_prev,norm_next") and first.endswith(",0.050000,0.100000,0.150000,0.200000,0.250000,0.300000")
        grid = screen.query_one(PatternGrid)
        await pilot.press("f")  # the grid shaded by the share of [CLS]
        np.testing.assert_allclose(grid.values, 0.1)  # the fake's weight share
        await pilot.press("n")
        await pilot.pause()
        np.testing.assert_allclose(grid.values, 0.05)  # its share of norm
        assert "‖αf‖ to [CLS]" in grid._legend() and "‖αf‖" in str(grid.border_title)
        assert "‖αf‖ cls 0.05" in rendered(screen.query_one("#head-details"))
        assert "value-weighted norms" in rendered(screen.query_one("#charts-content"))
        await pilot.press("n")
        await pilot.pause()
        np.testing.assert_allclose(grid.values, 0.1)
        assert "‖αf‖" not in rendered(screen.query_one("#head-details"))

    run(app, steps)
