"""The qa objective held against the tests' own computations: the start/end cross-entropy of answer tokens found from
the fast tokenizer's offsets in run_qa's windows, the official SQuAD script's exact match and F1 of the best span, and
the command line end to end on a tiny seeded question-answering model."""

from __future__ import annotations

import collections
import json
import re
import string
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import bertscope
from bertscope.analyses.importance.objectives import Tally, make_objective
from bertscope.analyses.importance.run import head_importance, measure
from bertscope.analyses.importance.squad import best_scores
from bertscope.data.task_files import read_squad
from bertscope.model.session import Session
from tests.family_models import FAMILIES, save_tiny_family
from tests.helpers.cli import assert_one_line_error
from tests.helpers.models import save_tiny

# Long enough that the tiny models' 64 tokens cut it into several windows.
CONTEXT = (
    "Dante Alighieri was born in Florence in 1265. He wrote the Divine Comedy while in exile from his city. "
    "The poem tells of a journey through Hell, Purgatory and Paradise, guided first by Virgil and then by Beatrice. "
    "Dante died in Ravenna in 1321, where his tomb can still be visited today."
)
QUESTIONS = [
    ("q1", "Where was Dante born?", [("Florence", CONTEXT.index("Florence"))]),
    ("q2", "When did Dante die?", [("1321", CONTEXT.index("1321")), ("in 1321", CONTEXT.index("in 1321"))]),
    ("q3", "Who guided him first?", [("Virgil", CONTEXT.index("Virgil"))]),
    ("q4", "Who painted the poem?", []),  # SQuAD 2.0: unanswerable
]


def squad_json(questions=QUESTIONS, context=CONTEXT) -> dict:
    qas = []
    for identifier, question, answers in questions:
        entry = {"id": identifier, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers]}
        if not answers:
            entry["is_impossible"] = True
        qas.append(entry)
    return {"version": "v2.0", "data": [{"title": "Dante", "paragraphs": [{"context": context, "qas": qas}]}]}


@pytest.fixture(scope="module")
def qa_dir(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("qa"), "BertForQuestionAnswering", seed=7)


@pytest.fixture(scope="module")
def qa_session(qa_dir):
    return Session.open(str(qa_dir), device="cpu")


@pytest.fixture(scope="module")
def squad_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("squad") / "dev.json"
    path.write_text(json.dumps(squad_json()))
    return str(path)


# --- the official SQuAD v1.1 evaluation, as its script writes it (v2.0's rule for empty answers) -------------


def official_normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_f1(prediction, ground_truth):
    prediction_tokens = official_normalize(prediction).split()
    ground_truth_tokens = official_normalize(ground_truth).split()
    if not prediction_tokens or not ground_truth_tokens:  # v2.0's compute_f1
        return int(prediction_tokens == ground_truth_tokens)
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def official_scores(prediction, golds):
    golds = golds or [""]
    exact = max(float(official_normalize(prediction) == official_normalize(g)) for g in golds)
    return exact, max(official_f1(prediction, g) for g in golds)


@pytest.mark.parametrize(
    ("prediction", "golds"),
    [
        ("The Florence!", ["florence"]),
        ("in  Florence, Italy", ["Florence"]),
        ("an apple and the pear", ["Apple and pear", "a pear"]),
        ("1321", ["in 1321", "1321"]),
        ("died in 1321", ["in 1321", "Ravenna"]),
        ("", []),  # unanswerable, no answer predicted
        ("Florence", []),  # unanswerable, an answer predicted
        ("", ["Florence"]),
        ("the", ["a"]),  # both normalise to nothing
    ],
)
def test_exact_match_and_f1_are_the_official_script_s(prediction, golds):
    assert best_scores(prediction, golds) == pytest.approx(official_scores(prediction, golds))


# --- the objective against the test's own windows, targets and spans ------------------------------------------


def own_windows(session):
    """Per question: its windows as run_qa makes them (384 or the model's limit, stride 128 or a third of it)."""
    length = min(384, session.max_length)
    for identifier, question, answers in QUESTIONS:
        encoded = session.tokenizer(
            question,
            CONTEXT,
            truncation="only_second",
            max_length=length,
            stride=min(128, length // 3),
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        yield identifier, answers, encoded


def own_target(encoded, window, answers):
    """The answer's first and last token in this window: the context tokens whose offsets hold its first and last
    characters; (0, 0) where the window lacks either (or there is no answer)."""
    if not answers:
        return 0, 0
    text, first_char = answers[0]
    last_char = first_char + len(text) - 1
    offsets, sequence = encoded["offset_mapping"][window], encoded.sequence_ids(window)
    holds = [p for p, (a, b) in enumerate(offsets) if sequence[p] == 1 and a <= first_char < b]
    ends = [p for p, (a, b) in enumerate(offsets) if sequence[p] == 1 and a <= last_char < b]
    return (holds[0], ends[0]) if holds and ends else (0, 0)


def test_loss_is_the_start_end_cross_entropy_and_f1_the_best_span_s(qa_session, squad_file):
    objective = make_objective(qa_session, "qa", list(read_squad(squad_file)), batch_size=3)
    losses, exact, overlap, windows_seen = [], [], [], 0
    with torch.no_grad():
        for _, answers, encoded in own_windows(qa_session):
            spans, nulls = [], []
            for window in range(len(encoded["input_ids"])):
                windows_seen += 1
                inputs = {k: torch.tensor([encoded[k][window]]) for k in ("input_ids", "token_type_ids", "attention_mask")}
                output = qa_session.model(**inputs)
                start, end = output.start_logits[0], output.end_logits[0]
                first, last = own_target(encoded, window, answers)
                losses.append(
                    float(F.cross_entropy(start[None], torch.tensor([first])) + F.cross_entropy(end[None], torch.tensor([last]))) / 2
                )
                context = [p for p, s in enumerate(encoded.sequence_ids(window)) if s == 1]
                for a in context:
                    for b in context:
                        if a <= b < a + 30:
                            offsets = encoded["offset_mapping"][window]
                            spans.append((float(start[a] + end[b]), CONTEXT[offsets[a][0] : offsets[b][1]]))
                nulls.append(float(start[0] + end[0]))
            score, text = max(spans)
            predicted = "" if min(nulls) > score else text  # the corpus has an unanswerable question: SQuAD 2.0
            e, f = official_scores(predicted, [t for t, _ in answers])
            exact.append(e)
            overlap.append(f)
    assert windows_seen > len(QUESTIONS)  # the context was cut into windows
    measured = measure(objective)
    assert measured.loss == pytest.approx(np.mean(losses), rel=1e-5)
    assert measured.metric == pytest.approx(np.mean(overlap)) and objective.exact_match == pytest.approx(np.mean(exact))
    assert objective.metric == "SQuAD F1"


def test_the_answer_is_targeted_in_the_window_that_holds_it_and_cls_in_the_others(qa_session, squad_file):
    objective = make_objective(qa_session, "qa", list(read_squad(squad_file)), batch_size=2)
    found = collections.defaultdict(list)  # question number -> (start, end, the window's context's characters)
    for batch in objective.batches:
        for row in range(batch.size):
            question = int(batch.target["question"][row])
            context = batch.target["context"][row].numpy()
            offsets = batch.target["offsets"][row].numpy()[context]
            start, end = int(batch.target["start"][row]), int(batch.target["end"][row])
            answer = CONTEXT[batch.target["offsets"][row][start][0] : batch.target["offsets"][row][end][1]] if start else ""
            found[question].append((start, end, answer, offsets[0][0], offsets[-1][1]))
    for number, (_, _, answers) in enumerate(QUESTIONS):
        windows = found[number]
        if not answers:
            assert all(start == end == 0 for start, end, *_ in windows)
            continue
        text, first_char = answers[0]
        holding = [w for w in windows if w[3] <= first_char and first_char + len(text) <= w[4]]
        assert holding and all(w[2] == text for w in holding)  # found by its offsets in each window that holds it
        assert all(w[:2] == (0, 0) for w in windows if w not in holding)  # [CLS] in the others
    assert any(len(windows) > 1 and any(w[0] == 0 for w in windows) for windows in found.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_serves_qa(family, tmp_path):
    session = Session.open(str(save_tiny_family(tmp_path / family, family, "ForQuestionAnswering")), device="cpu")
    assert session.is_question_answerer
    objective = make_objective(session, "qa", list(read_squad(_written(tmp_path))), batch_size=2)
    result = list(head_importance(objective, "gradient", normalize=False))[-1].result
    assert np.isfinite(result.raw).all() and result.raw.any() and 0 <= result.baseline_metric <= 1
    assert measure(objective).loss == pytest.approx(result.baseline_loss, rel=1e-5)
    assert measure(objective, session.mask("0:*,1:1")).loss != measure(objective).loss  # the heads' gates reach the loss
    inputs = session.tokenize_batch(["Where was Dante born?"])
    with torch.inference_mode():  # patching's answer metric reads the family's QA head on the last hidden state
        out = session.run(inputs)
        logits = session.token_logits(out.hidden_states[-1])
    np.testing.assert_allclose(logits[..., 0].numpy(), out.start_logits.float().numpy(), atol=1e-5)
    np.testing.assert_allclose(logits[..., 1].numpy(), out.end_logits.float().numpy(), atol=1e-5)
    explained = bertscope.attribute(session, "Where was Dante born?", pair="Dante was born in Florence.", method="gradient-x-input")
    assert explained.target["kind"] == "answer" and np.isfinite(explained.scores).all()


def _written(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(squad_json()))
    return path


# --- the command line -----------------------------------------------------------------------------------------


def test_importance_and_pruning_of_a_qa_model_end_to_end(run, qa_dir, squad_file):
    result = run("importance", "-O", "qa", "--data", squad_file, "--method", "ablation", "-m", str(qa_dir), "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["objective"] == "qa" and payload["sentences"] == len(QUESTIONS) and payload["metric"] == "SQuAD F1"
    assert 0 <= payload["baseline"]["metric"] <= 1 and len(payload["heads"]) == 12 and len(payload["layers"]) == 3
    assert any(note.startswith("exact match") for note in payload["notes"]) and any("windows of 64" in n for n in payload["notes"])
    gradient = json.loads(run("importance", "-O", "qa", "--data", squad_file, "-m", str(qa_dir), "--json").stdout)
    assert gradient["baseline"] == payload["baseline"]
    curve = json.loads(run("prune", "-O", "qa", "--data", squad_file, "--curve", "--step", "0.5", "-m", str(qa_dir), "--json").stdout)
    assert [point["heads_pruned"] for point in curve["points"]] == [0, 6, 12] and curve["metric"] == "SQuAD F1"
    pruned = json.loads(run("prune", "-O", "qa", "--data", squad_file, "--fraction", "0.25", "-m", str(qa_dir), "--json").stdout)
    assert pruned["heads_pruned"] == 3 and pruned["before"]["loss"] == pytest.approx(curve["points"][0]["loss"])


def test_bad_qa_inputs_are_one_line(run, qa_dir, squad_file, tiny_bert_dir, tmp_path):
    moved = squad_json([("q9", "Where was Dante born?", [("Florence", 3)])])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(moved))
    assert_one_line_error(
        run("importance", "-O", "qa", "--data", str(bad), "-m", str(qa_dir)), "question q9: answer 'Florence' is not at answer_start 3"
    )
    assert_one_line_error(
        run("importance", "-O", "qa", "--data", squad_file, "-m", str(tiny_bert_dir)),
        "needs an extractive question-answering model (…ForQuestionAnswering); BertModel is not one; "
        "objectives that work for this model: probe, preserve, similarity, embedding",
    )
    assert_one_line_error(run("importance", "-O", "qa", "-m", str(qa_dir)), "the qa objective needs questions")
    long = tmp_path / "long.json"
    long.write_text(json.dumps(squad_json([QUESTIONS[0], ("q7", "Where " * 60 + "?", []), QUESTIONS[1]])))
    assert_one_line_error(
        run("importance", "-O", "qa", "--data", str(long), "-m", str(qa_dir)),
        "question q7: the question and a 21-token overlap leave no room",
    )
    (tmp_path / "plain.txt").write_text("Dante was born in Florence.\n")
    assert_one_line_error(run("importance", "-O", "qa", "--data", str(tmp_path / "plain.txt"), "-m", str(qa_dir)), "not JSON")


def test_the_explorer_measures_a_squad_file_as_the_command_line_does(qa_session, squad_file):
    """The explorer's `I` → qa on a file: read through the API, prepared by the real backend, the same loss and metric
    under a mask as `importance -O qa --data` prepares."""
    from bertscope.model.masks import HeadMask
    from bertscope.session_backend import SessionBackend
    from bertscope.ui.importance import objective_choices, read_objective_file

    backend = SessionBackend(qa_session)
    assert [name for name, _ in objective_choices(backend.info)] == ["preserve", "qa:file"]
    data, more = read_objective_file("qa", squad_file, 64)
    prepared = backend.objective("qa", data)
    assert not more and prepared.sentences == len(QUESTIONS) and prepared.source == squad_file
    mask = HeadMask(3, 4, frozenset({(0, 1), (2, 3)}))
    ours, cli = backend.measure(prepared, mask), bertscope.api.measure(bertscope.api.objective(qa_session, "qa", data=squad_file), mask)
    assert (ours.loss, ours.metric) == (cli.loss, cli.metric)


def test_a_model_that_points_at_the_answers_scores_one(qa_session, squad_file, monkeypatch):
    """An oracle (logits peaked at each window's targets): every answer found, the unanswerable question left unanswered."""
    objective = make_objective(qa_session, "qa", list(read_squad(squad_file)), batch_size=3)
    batches = list(objective.batches)
    by_input = {id(batch.inputs["input_ids"]): batch for batch in batches}

    def oracle(inputs, **_):
        target = by_input[id(inputs["input_ids"])].target
        start, end = torch.zeros(inputs["input_ids"].shape), torch.zeros(inputs["input_ids"].shape)
        rows = torch.arange(start.shape[0])
        start[rows, target["start"]] = end[rows, target["end"]] = 10.0
        return SimpleNamespace(start_logits=start, end_logits=end)

    monkeypatch.setattr(qa_session, "run", oracle)
    tally = Tally(objective)
    for batch in batches:
        tally.add(objective.scores(batch, None, "zero"))
    assert tally.measurement()[0].metric == 1.0 and objective.exact_match == 1.0
