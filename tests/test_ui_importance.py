"""Head importance in the explorer, on the fake backend: overlay, live objective, prune to X%, pruning curve."""

from __future__ import annotations

import json

from bertscope.ui.importance import ObjectiveChoiceScreen, ObjectiveFileScreen, ObjectivePanel, PruneToScreen, PruningCurveScreen
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
        assert [option.id for option in screen.query_one("OptionList").options] == [
            "similarity",
            "embedding",
            "preserve",
            "similarity:file",  # sentence pairs of the user's, beside the shipped ones
        ]
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


CONTEXT = "Dante was born in Florence in 1265 and died in Ravenna in 1321."


def squad_file(path, questions):
    """A SQuAD JSON file of `questions`, each (id, question, answer text, answer_start) on CONTEXT."""
    qas = [{"id": i, "question": q, "answers": [{"text": t, "answer_start": s}]} for i, q, t, s in questions]
    path.write_text(json.dumps({"data": [{"title": "Dante", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]}))
    return path


async def objective_on_file(pilot, choice, path):
    """`I`, the entry `choice` (an objective on a file), and the file's path typed into the prompt."""
    await pilot.press("I")
    screen = pilot.app.screen
    assert isinstance(screen, ObjectiveChoiceScreen)
    options = screen.query_one("OptionList")
    options.highlighted = [option.id for option in options.options].index(choice)
    await pilot.press("enter")
    await pilot.pause()
    assert isinstance(pilot.app.screen, ObjectiveFileScreen)
    pilot.app.screen.query_one("Input").value = str(path)
    await pilot.press("enter")
    await settle(pilot)


def test_a_qa_model_measures_its_answers_on_a_squad_file_of_the_users(tmp_path):
    app = make_app(FakeBackend(task="qa"))
    questions = [("q1", "Where was Dante born?", "Florence", 18), ("q2", "When did he die?", "1321", 58)]
    path = squad_file(tmp_path / "dev.json", questions)

    async def steps(pilot):
        await pilot.press("i")
        await settle(pilot)
        assert app.fake.importance_calls == [("preserve", 64)]  # no SQuAD data ships: the default is preserve
        await pilot.press("I")
        options = app.screen.query_one("OptionList").options
        assert [option.id for option in options] == ["preserve", "qa:file"]
        assert str(options[1].prompt) == "qa: on a file of yours: a SQuAD-1.1 or 2.0 JSON file"
        await pilot.press("escape")
        await objective_on_file(pilot, "qa:file", path)
        assert app.fake.importance_calls == [("preserve", 64), ("qa", 2)]
        assert app.fake.ablation_runs[-1] == ("qa", 2)  # Kovaleva et al. §6 on the file too
        panel = app.query_one(ObjectivePanel)
        assert panel.border_title == "objective: qa on dev.json" and "2 questions of dev.json" in rendered(panel)
        assert [s.label for s in panel.sample.sentences] == ["q1", "q2"] and app.state.figure == "importance"
        await pilot.press("space")  # a mask is measured on the file's questions
        await settle(pilot)
        assert "this mask 0.9500" in rendered(panel)
        await pilot.press("I")  # the file's entry is the one highlighted now
        options = app.screen.query_one("OptionList")
        assert options.options[options.highlighted].id == "qa:file"

    run(app, steps)


def test_a_file_the_model_cannot_take_is_one_notification_and_the_objective_stays(tmp_path):
    app = make_app(FakeBackend(task="token-classification"))
    unknown = tmp_path / "ner.txt"
    unknown.write_text("-DOCSTART- O\n\nDante B-PER\nwrote O\nthe O\nComedy B-MISC\n")

    async def steps(pilot):
        await pilot.press("i")
        await settle(pilot)
        panel = app.query_one(ObjectivePanel)
        before = rendered(panel)
        for path, said in [
            (tmp_path / "missing.conll", "missing.conll: no such file; check the path"),
            (unknown, "label 'B-MISC' is not one of the model's labels (O, B-PER, I-PER, B-LOC, I-LOC)"),
        ]:
            app.clear_notifications()
            await objective_on_file(pilot, "token-classification:file", path)
            errors = [n.message for n in app._notifications if n.severity == "error"]
            assert len(errors) == 1 and said in errors[0] and "Traceback" not in errors[0]
            assert panel.border_title == "objective: token-classification" and panel.data_file is None
            assert rendered(panel) == before and app.fake.importance_calls == [("token-classification", 64)]
            assert app.state.figure == "importance"

    run(app, steps)


def test_an_answer_not_in_its_context_is_refused_and_a_long_file_is_cut(tmp_path):
    app = make_app(FakeBackend(task="qa"))
    wrong = squad_file(tmp_path / "wrong.json", [("q1", "Where was Dante born?", "Florence", 3)])
    many = squad_file(tmp_path / "many.json", [(f"q{n}", "Where was Dante born?", "Florence", 18) for n in range(70)])

    async def steps(pilot):
        await objective_on_file(pilot, "qa:file", wrong)
        errors = [n.message for n in app._notifications if n.severity == "error"]
        assert errors == [
            f"{wrong}: question q1: answer 'Florence' is not at answer_start 3 in its context (found 'te was b'); "
            "fix the offset or the answer's text"
        ]
        assert app.fake.importance_calls == [] and app.query_one(ObjectivePanel).chosen is None
        await objective_on_file(pilot, "qa:file", many)
        assert app.fake.importance_calls == [("qa", 64)]  # as many as the shipped data's, the pane says so
        assert "the first 64 questions of many.json" in rendered(app.query_one(ObjectivePanel))

    run(app, steps)


def test_escape_stops_the_importance_estimate_and_i_starts_it_again():
    app = make_app()

    async def steps(pilot):
        await settle(pilot)
        app.fake.release.clear()  # the estimate waits before its first step
        await pilot.press("i")
        await pilot.pause(0.2)
        panel = app.query_one(ObjectivePanel)
        assert panel.estimating.running
        await pilot.press("escape")
        assert not panel.estimating.running and panel.importance is None
        assert any(str(note.message) == "the head importance estimate cancelled" for note in app._notifications)
        app.fake.release.set()
        await settle(pilot)
        assert panel.importance is None and "importance" not in rendered(app.query_one(HeadGrid))  # its steps were dropped
        await pilot.press("i")
        await settle(pilot)
        assert panel.importance is not None and "importance (mlm)" in rendered(app.query_one(HeadGrid))

    run(app, steps)
