"""The prediction pane on the fake backend: a fine-tuned model's labels, answer or cosine, before → after the mask."""

from __future__ import annotations

from rich.text import Text

from bertscope.ui.task_pane import CHANGED, TaskPanel
from tests.fake_backend import FakeBackend
from tests.helpers.ui import erase, make_app, rendered, run, settle


def highlighted(panel: TaskPanel) -> list[str]:
    """The stretches of the pane drawn as changed."""
    found = []
    for line in panel.content.renderables:
        if isinstance(line, Text):
            found += [line.plain[span.start : span.end].strip() for span in line.spans if span.style == CHANGED]
    return found


def test_entity_labels_show_under_the_words_and_change_with_the_mask():
    app = make_app(FakeBackend(task="token-classification"), text="dante was born in florence")

    async def steps(pilot):
        panel = app.query_one(TaskPanel)
        assert panel.display and panel.border_title == "entity labels"
        words, labels = rendered(panel).splitlines()[:2]
        assert words.split() == ["dante", "was", "born", "in", "florence"]
        assert labels.split() == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
        assert words.index("was") == labels.index("B-PER")  # each label under its word
        assert highlighted(panel) == []
        await pilot.press("space")  # one head off: the first word's label moves on by one
        await settle(pilot)
        assert panel.border_title == "entity labels · before → after"
        lines = rendered(panel).splitlines()
        assert lines[0] == "1 of 5 changed · mean p 0.900 → 0.880"  # the fake: the moved label's p 0.8
        assert lines[3].split() == ["B-PER", "B-PER", "I-PER", "B-LOC", "I-LOC"]
        assert highlighted(panel) == ["B-PER"]
        await pilot.press("x")  # every head on again: no after row
        await settle(pilot)
        assert panel.border_title == "entity labels" and len(rendered(panel).splitlines()) == 2

    run(app, steps)


def test_labels_wrap_into_blocks_at_80_columns():
    text = "the quick brown fox jumps over the lazy dog near the riverbank today"
    app = make_app(FakeBackend(task="token-classification"), text=text)

    async def steps(pilot):
        await pilot.press("space")
        await settle(pilot)
        panel = app.query_one(TaskPanel)
        lines = rendered(panel).splitlines()
        assert max(len(line.rstrip()) for line in lines) <= panel.content_size.width
        assert " ".join(lines[1::3]).split() == text.split()  # every word shown once, blocks of three rows

    run(app, steps, size=(80, 24))


def test_a_qa_model_asks_for_a_context_then_shows_the_answer_moving():
    app = make_app(FakeBackend(task="qa"), text="where was dante born")

    async def steps(pilot):
        panel = app.query_one(TaskPanel)
        assert not panel.display and app.main_screen.query_one("#pair").placeholder == "the question's context"
        app.main_screen.query_one("#pair").value = "dante was born in florence"
        await app.main_screen.query_one("#pair").action_submit()
        await settle(pilot)
        assert panel.border_title == "answer" and rendered(panel).splitlines()[:2] == ['"dante" (6–6)', "score 5.00 · p 0.70"]
        await pilot.press("space")
        await settle(pilot)
        assert rendered(panel).splitlines()[1:3] == ['→ "was" (7–7)', "score 5.00 → 4.00 · p 0.70 → 0.60"]
        assert highlighted(panel) == ['"was" (7–7)']

    run(app, steps)


def test_a_sentence_embedding_model_shows_the_cosine_of_the_two_boxes():
    app = make_app(FakeBackend(task="similarity"), text="the cat sat", pair="a cat was sitting")

    async def steps(pilot):
        panel = app.query_one(TaskPanel)
        assert panel.display and rendered(panel).startswith("cosine 0.8000")
        await pilot.press("space", "right", "space")
        await settle(pilot)
        assert "cosine 0.8000 → 0.7000 (-0.1000)" in rendered(panel)

    run(app, steps)


def test_an_erasure_moves_the_prediction_as_a_mask_does():
    app = make_app(FakeBackend(task="similarity"), text="the cat sat", pair="a cat was sitting")

    async def steps(pilot):
        await erase(pilot, "upos", 1)
        panel = app.query_one(TaskPanel)
        assert "cosine 0.8000 → 0.7000 (-0.1000)" in rendered(panel)  # the fake: 0.1 lower under an erasure
        assert app.fake.task_calls[-1] == ("the cat sat", "")  # no head masked: the erasure alone

    run(app, steps)
