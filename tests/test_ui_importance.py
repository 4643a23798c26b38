"""Head importance in the explorer, on the fake backend: overlay, live objective, prune to X%, pruning curve."""

from __future__ import annotations

from bertscope.ui.importance import ObjectiveChoiceScreen, ObjectivePanel, PruneToScreen, PruningCurveScreen
from bertscope.ui.task_pane import TaskPanel
from bertscope.ui.widgets.head_grid import HeadGrid
from tests.fake_backend import FakeBackend
from tests.helpers.ui import make_app, rendered, run, settle


def test_importance_overlay_shades_the_grid_and_goes_back():
    app = make_app()

    async def steps(pilot):
        await pilot.press("i")
        await settle(pilot)
        assert app.fake.importance_calls == [("mlm", 64)]  # the fake has an MLM head; the sample corpus
        assert not app.query_one(TaskPanel).display  # an MLM model predicts no labels, answer or cosine
        grid = app.query_one(HeadGrid)
        assert "importance (mlm)" in rendered(grid)
        assert grid.values[2, 3] == 12 and grid.value_range == (0.0, 12.0)
        assert "1.000" in rendered(grid)  # head 0:0 is selected: importance 1
        await pilot.press("i")
        assert "entropy" in rendered(grid) and app.state.figure == "entropy"
        await pilot.press("i")  # estimated once: no second run
        assert app.fake.importance_calls == [("mlm", 64)] and app.state.figure == "importance"
        await pilot.press("f")  # cycling figures leaves the overlay
        assert app.state.figure == "entropy"

    run(app, steps)


def test_objective_follows_every_toggle():
    app = make_app()

    async def steps(pilot):
        await pilot.press("i")
        await settle(pilot)
        panel = app.query_one(ObjectivePanel)
        assert panel.display and "no mask   1.0000" in rendered(panel)
        await pilot.press("space")
        await settle(pilot)
        assert "this mask 0.9500" in rendered(panel) and "-0.0500" in rendered(panel)
        await pilot.press("right", "space")
        await settle(pilot)
        assert "this mask 0.9000" in rendered(panel)

    run(app, steps)


def test_prune_to_a_percentage_masks_the_least_important_heads():
    app = make_app()

    async def steps(pilot):
        await pilot.press("P")
        assert isinstance(app.screen, PruneToScreen)
        await pilot.press(*"150", "enter")  # outside 0-100: refused, the prompt stays
        assert isinstance(app.screen, PruneToScreen)
        app.screen.query_one("Input").value = ""
        await pilot.press(*"25", "enter")
        await settle(pilot)
        assert app.main_screen.conditions.mask.off == {(0, 0), (0, 1), (0, 2)}  # 3 of 12 heads, the least important
        assert "3 masked" in rendered(app.query_one("#status"))
        assert "this mask 0.8500" in rendered(app.query_one(ObjectivePanel))

    run(app, steps)


def test_pruning_curve_screen_and_applying_its_mask():
    app = make_app()

    async def steps(pilot):
        await pilot.press("C")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, PruningCurveScreen) and screen.result is not None
        text = rendered(screen.query_one("#curve-content"))
        assert "100%" in text and "cosine" in text
        status = rendered(screen.query_one("#curve-status"))
        assert "prunable within a drop of 0.2: 25% (3 heads)" in status
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, PruningCurveScreen)
        assert app.main_screen.conditions.mask.off == {(0, 0), (0, 1), (0, 2)}

    run(app, steps)


def test_heads_whose_removal_raises_the_metric_are_marked_and_listed():
    app = make_app()

    async def steps(pilot):
        await pilot.press("i")
        await settle(pilot)
        assert app.fake.ablation_runs == [("mlm", 64)]  # each head switched off alone, by the API's ablation importance
        grid, panel = app.query_one(HeadGrid), app.query_one(ObjectivePanel)
        assert "+ off, metric rises: 2:3 2:2" in rendered(panel)  # the fake's: 2:3 raises it most
        rows = rendered(grid).splitlines()
        assert rows[3].split()[3:5] == ["+", "+"] and "+" not in "".join(rows[1:3])
        assert "importance (mlm) · + off:…" in rendered(grid)  # the legend says what + is, cut to a narrow grid
        await pilot.press("down", "down", "right", "right")
        assert "2:2 = 11.000 +" in rendered(grid)  # its importance, and its mark
        await pilot.press("i")  # back to entropy: no marks
        assert "+" not in rendered(grid)

    run(app, steps)


def test_the_objective_is_chosen_among_those_that_apply_defaulting_to_the_models_task():
    app = make_app(FakeBackend(task="similarity"))

    async def steps(pilot):
        await pilot.press("i")
        await settle(pilot)
        assert app.fake.importance_calls == [("similarity", 48)]  # a sentence-embedding model: its task, the sample pairs
        assert app.query_one(ObjectivePanel).border_title == "objective: similarity"
        await pilot.press("I")
        screen = app.screen
        assert isinstance(screen, ObjectiveChoiceScreen)
        assert [option.id for option in screen.query_one("OptionList").options] == ["similarity", "embedding", "preserve"]
        await pilot.press("down", "enter")
        await settle(pilot)
        assert app.fake.importance_calls == [("similarity", 48), ("embedding", 64)] and app.state.figure == "importance"
        assert "importance (embedding)" in rendered(app.query_one(HeadGrid))
        await pilot.press("I", "escape")  # escape keeps the objective
        await settle(pilot)
        assert len(app.fake.importance_calls) == 2

    run(app, steps)


def test_a_token_classifier_measures_its_labels_on_the_sample_treebank():
    app = make_app(FakeBackend(task="token-classification"))

    async def steps(pilot):
        await pilot.press("i")
        await settle(pilot)
        assert app.fake.importance_calls == [("token-classification", 64)]
        sentences = app.query_one(ObjectivePanel).sample.sentences
        assert all(sentence.words and sentence.upos for sentence in sentences)  # words to label, UPOS the backend may take

    run(app, steps)
