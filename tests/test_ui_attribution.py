"""The attribution row of the explorer on the fake backend: keys, shading, masks, cancel, failures."""

from __future__ import annotations

from bertscope.model.results import ModelInfo
from bertscope.ui.attribution import AttributionRow, targets_for
from tests.fake_backend import FakeBackend
from tests.helpers.ui import make_app, rendered, run, settle


def row_text(app) -> str:
    return rendered(app.query_one(AttributionRow))


def test_b_shades_the_tokens_and_cycles_the_methods():
    app = make_app(text="the capital of france is [mask]", glyphs=False)

    async def steps(pilot):
        row = app.query_one(AttributionRow)
        assert not row.display and app.fake.attributions == []  # off until asked for
        await pilot.press("b")
        await settle(pilot)
        assert row.display and row.method == "gradient"
        assert app.fake.attributions[-1] == ("the capital of france is [mask]", "gradient", "mlm", None, "")
        text = row_text(app)
        assert "saliency · log p(paris) at [MASK] 6 = -0.25" in text
        assert "the capital of france is [mask]" in text
        await pilot.press("b", "b")
        await settle(pilot)
        assert row.method == "integrated-gradients" and "IG · " in row_text(app) and "error 1.2% (32 steps)" in row_text(app)
        for method, short in [
            ("attention-rollout", "rollout"),
            ("attention-flow", "flow"),
            ("norms", "‖αf‖ rolled"),
            ("value-zeroing", "value zeroing rolled"),
            ("alti", "ALTI rolled"),
        ]:  # the context-mixing measures, rolled out, read at the decision's row (analyses.mixing.run)
            await pilot.press("b")
            await settle(pilot)
            assert row.method == method and row_text(app).startswith(f"{short} · ")
            assert app.fake.attributions[-1][1] == method
        await pilot.press("b")
        await settle(pilot)
        assert row.method is None and not row.display

    run(app, steps)


def test_the_shading_follows_the_scores():
    app = make_app(text="the capital of france is [mask]", glyphs=False)

    async def steps(pilot):
        await pilot.press("b", "b")  # gradient x input: signed
        await settle(pilot)
        row = app.query_one(AttributionRow)
        scores = row.result.scores
        content = row.content.renderables[1]  # the header, then the shaded sentence
        styles = {}
        for span in content.spans:
            styles[content.plain[span.start : span.end]] = span.style
        # the highest-scoring word gets the strongest orange, a negative one purple
        best = int(scores.argmax())
        worst = int(scores.argmin())
        assert scores[best] > 0 > scores[worst]
        best_colour = styles[row.result.tokens[best]].bgcolor.get_truecolor()
        worst_colour = styles[row.result.tokens[worst]].bgcolor.get_truecolor()
        assert best_colour.red > best_colour.blue and worst_colour.blue > worst_colour.green

    run(app, steps)


def test_B_switches_to_a_probe_decision_and_a_mask_recomputes():
    app = make_app(text="the keys to the cabinet are on the table")

    async def steps(pilot):
        await pilot.press("b")
        await settle(pilot)
        assert any("no [MASK]" in n.message for n in app._notifications)  # the MLM target needs one
        assert "could not explain" in row_text(app)
        await pilot.press("B")
        await settle(pilot)
        assert app.fake.attributions[-1][2:4] == ("probe", "subject_number")
        assert "subject_number probe L2 (acc 0.900): log p(NNS)" in row_text(app)
        before = app.query_one(AttributionRow).result.scores.copy()
        await pilot.press("space")  # a head off: the attribution follows the mask
        await settle(pilot)
        assert app.fake.attributions[-1][4] == "0:0"
        assert "1 head(s) off" in row_text(app)
        assert (app.query_one(AttributionRow).result.scores != before).any()
        await pilot.press("slash")
        app.query_one("#sentence").value = "a dog barked"
        await pilot.press("enter")
        await settle(pilot)
        assert app.query_one(AttributionRow).result.tokens == ("[CLS]", "a", "dog", "barked", "[SEP]")

    run(app, steps)


def test_escape_cancels_a_slow_attribution_and_the_explorer_stays_responsive():
    backend = FakeBackend()
    app = make_app(backend, text="the keys to the cabinet are on the table")

    async def steps(pilot):
        await pilot.press("B")
        backend.release.clear()  # the probe's training hangs until released
        await pilot.press("b")
        await pilot.pause(0.2)
        row = app.query_one(AttributionRow)
        assert row.running
        await pilot.press("right")  # the grid still answers
        await pilot.pause()
        assert app.state.head == 1
        await pilot.press("escape")
        await pilot.pause()
        assert any("attribution cancelled" in n.message for n in app._notifications)
        assert "cancelled" in row_text(app)
        backend.release.set()
        await settle(pilot)
        assert row.result is None  # the cancelled run never shows

    run(app, steps)


def test_targets_offered_by_the_model():
    def info(mlm, labels):
        return ModelInfo(
            source="m",
            family="BERT",
            architecture="x",
            num_layers=1,
            num_heads=1,
            hidden_size=8,
            vocab_size=10,
            max_length=8,
            has_mlm_head=mlm,
            num_labels=labels,
            device="cpu",
            dtype="float32",
            parameters=1,
            fingerprint="f",
        )

    assert [t.kind for t in targets_for(info(True, None))][:2] == ["mlm", "probe"]
    assert [t.kind for t in targets_for(info(False, 3))][:2] == ["class", "probe"]
    bundled = targets_for(info(False, None))
    assert bundled[0].probe == "subject_number" and all(t.kind == "probe" for t in bundled)
