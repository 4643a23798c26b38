"""The geometry and comparison screens, on the fake backend."""

from __future__ import annotations

from bertscope.ui.comparison import ComparisonScreen
from bertscope.ui.geometry import GeometryScreen
from bertscope.ui.widgets.pattern_grid import PatternGrid
from tests.fake_backend import FakeBackend
from tests.helpers.ui import heatmap_text, make_app, rendered, run, settle


def test_geometry_screen_without_a_corpus_runs_on_the_generated_treebank():
    from bertscope.ui.geometry import TREEBANK_SENTENCES

    app = make_app()

    async def steps(pilot):
        await pilot.press("g")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, GeometryScreen) and screen.query_one("#geometry-corpus").value == ""
        assert screen.result.sentences == TREEBANK_SENTENCES and not screen.running

    run(app, steps)


def test_geometry_screen_scatter_layer_slider_and_labels(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i}" for i in range(7)))
    app = make_app()

    async def steps(pilot):
        await pilot.press("g")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, GeometryScreen)
        screen.query_one("#geometry-corpus").value = str(corpus)
        await screen.query_one("#geometry-corpus").action_submit()
        await settle(pilot)
        assert screen.result.sentences == 7 and not screen.running
        assert "7 sentences · 12 of 35 tokens" in rendered(screen.query_one(".progress-text"))
        assert screen.shown_layer == 3  # the last hidden state of the fake's 3 layers
        assert "[3]" in rendered(screen.query_one("#layer-slider"))
        picture = rendered(screen.query_one("#scatter"))
        assert "layer 3 · PC1 30%" in picture and "A" in picture and "B" in picture
        charts = rendered(screen.query_one("#geometry-charts"))
        assert "linear CKA" in charts and "intrinsic dimension" in charts and "ID 5.0" in charts
        await pilot.press("right")
        assert screen.shown_layer == 0 and "layer 0 · PC1" in rendered(screen.query_one("#scatter"))
        assert "ID 2.0, 50% of 10 neighbours kept in layer 1" in rendered(screen.query_one("#geometry-charts"))
        await pilot.press("left", "left")
        assert screen.shown_layer == 2
        await pilot.press("f")
        assert screen.label == "parity" and "parity" in rendered(screen.query_one("#scatter"))
        await pilot.press("escape")
        assert not isinstance(app.screen, GeometryScreen)

    run(app, steps)


def test_geometry_run_can_be_cancelled_and_a_missing_file_is_a_notification(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence {i}" for i in range(300)))
    app = make_app(FakeBackend(delay=0.05))

    async def steps(pilot):
        await pilot.press("g")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#geometry-corpus").value = str(corpus)
        await screen.query_one("#geometry-corpus").action_submit()
        await pilot.pause(0.3)
        assert screen.running
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, GeometryScreen) and not screen.running
        assert screen.result is None or screen.result.sentences == 20  # never the cancelled run's
        assert "cancelled" in rendered(screen.query_one(".progress-text"))
        screen.query_one("#geometry-corpus").value = str(tmp_path / "missing.txt")
        await screen.query_one("#geometry-corpus").action_submit()
        await settle(pilot)
        assert "stopped:" in rendered(screen.query_one(".progress-text")) and "missing.txt" in rendered(screen.query_one(".progress-text"))
        await pilot.press("escape")
        assert not isinstance(app.screen, GeometryScreen)

    run(app, steps)


def test_comparison_screen_shades_heads_and_opens_one(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i}" for i in range(4)))
    app = make_app()

    async def steps(pilot):
        await pilot.press("c")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ComparisonScreen)
        screen.query_one("#compare-corpus").value = str(corpus)
        screen.query_one("#model-b").value = "other-vocab"
        await screen.query_one("#model-b").action_submit()
        await settle(pilot)
        assert screen.result is None and "tokenizer differs" in rendered(screen.query_one(".progress-text"))
        screen.query_one("#model-b").value = "fine-tuned"
        await screen.query_one("#model-b").action_submit()
        await settle(pilot)
        grid = screen.query_one(PatternGrid)
        assert grid.values[2, 3] == 0.75 and grid.value_range == (0.7, 1.0)
        await pilot.press("down", "right")
        assert "head 1:1: cosine 0.900 ± 0.010 over 4 sentences" in rendered(screen.query_one("#compare-head"))
        charts = rendered(screen.query_one("#compare-charts"))
        assert "CKA of layer l in A and B" in charts and "0.95" in charts and "A0" in charts
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ComparisonScreen)
        assert (app.state.layer, app.state.head) == (1, 1) and "layer 1 · head 1" in heatmap_text(app)

    run(app, steps)


def test_geometry_screen_at_80_by_24(tmp_path):
    app = make_app()

    async def steps(pilot):
        await pilot.press("g")
        await settle(pilot)
        screen = app.screen
        assert screen.result is not None  # the sample CoNLL-U corpus by default
        scatter = screen.query_one("#scatter")
        assert scatter.size.width >= 30 and scatter.size.height >= 10
        assert "linear CKA" in rendered(screen.query_one("#geometry-charts"))

    run(app, steps, size=(80, 24))
