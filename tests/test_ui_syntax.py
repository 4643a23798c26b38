"""Heads that track syntax in the explorer, on the fake backend: the grid figure, relation and direction, the mask."""

from __future__ import annotations

from bertscope.analyses.attention.headstats import FIGURES
from bertscope.ui.syntax import SyntaxPanel
from bertscope.ui.widgets.head_grid import HeadGrid
from tests.helpers.ui import make_app, overview_of, rendered, run, settle


def test_the_f_cycle_reaches_the_syntax_figure_and_shades_heads_by_accuracy():
    app = make_app()

    async def steps(pilot):
        await settle(pilot)
        await pilot.press(*["f"] * len(FIGURES))  # past every per-sentence figure
        await settle(pilot)
        assert app.state.figure == "syntax"
        grid, panel = app.query_one(HeadGrid), app.query_one(SyntaxPanel)
        assert panel.display and app.fake.syntax_calls == [""]
        assert "tracks det dep→head" in rendered(grid)
        assert grid.values[1, 2] == 1.0 and grid.values[0, 0] == 0.5 and grid.value_range == (0.0, 1.0)  # the fake's det head
        text = rendered(panel)
        assert "best 1:2 100%" in text and "offset +1 50%" in text and "164 sample sentences" in text
        await pilot.press("f")  # on round: the panel goes
        assert app.state.figure == "entropy" and not panel.display

    run(app, steps)


def test_y_chooses_the_relation_and_Y_the_direction():
    app = make_app()

    async def steps(pilot):
        await settle(pilot)
        await pilot.press("y")  # straight to the figure, on det
        await settle(pilot)
        grid, panel = app.query_one(HeadGrid), app.query_one(SyntaxPanel)
        assert app.state.figure == "syntax" and panel.relation == "det"
        await pilot.press("y")
        assert panel.relation == "nsubj" and "tracks nsubj dep→head" in rendered(grid) and grid.values[2, 0] == 1.0
        await pilot.press("Y")
        assert "tracks nsubj head→dep" in rendered(grid) and grid.values[2, 0] == 0.5
        await pilot.press("y", "y")
        assert panel.relation == "det"  # round the three relations of the fake
        assert app.fake.syntax_calls == [""]  # one run: choosing only repaints

    run(app, steps)


def test_the_figure_follows_the_mask():
    app = make_app()

    async def steps(pilot):
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        grid = app.query_one(HeadGrid)
        app.query_one(HeadGrid).focus()
        await pilot.press("down", "right", "right", "space")  # head 1:2, det's best, off
        await settle(pilot)
        assert app.fake.syntax_calls == ["", "1:2"]
        assert grid.values[1, 2] == 0.0 and "best 0:0" in rendered(app.query_one(SyntaxPanel))

    run(app, steps)


def test_the_overview_of_a_treebank_tables_and_shades_heads_that_track_syntax():
    from bertscope.data.corpus import sample_corpus
    from bertscope.ui.widgets.pattern_grid import PatternGrid

    app = make_app()

    async def steps(pilot):
        screen = await overview_of(pilot)
        assert screen.syntax is None  # the sample text corpus has no trees
        await pilot.press("y")
        assert screen.shading == "pattern"  # and a notification says what to give
        screen.query_one("#corpus").value = str(sample_corpus("conllu"))
        await screen.query_one("#corpus").action_submit()
        await settle(pilot)
        assert screen.syntax is not None and screen.syntax.sentences == 164
        charts = rendered(screen.query_one("#charts-content"))
        assert "heads that track syntax" in charts and "det" in charts and "nsubj" in charts
        await pilot.press("y")
        grid = screen.query_one(PatternGrid)
        assert screen.shading == "syntax" and "tracks det dep→head" in grid._legend() and grid.values[1, 2] == 1.0
        await pilot.press("y", "Y")
        assert "tracks nsubj head→dep" in grid._legend()
        assert "tracks nsubj head→dep 50%" in rendered(screen.query_one("#head-details"))

    run(app, steps)
