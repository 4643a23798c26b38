"""`attribute` and `patch` on fine-tuned task models: a token classifier's label at a word, a QA model's answer span,
a sentence-embedding model's cosine between two sentences, held against the tests' own autograd and forward passes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import bertscope
from bertscope.base.errors import InputError
from bertscope.model.session import Session
from tests.helpers.cli import assert_one_line_error
from tests.helpers.models import NER_LABELS, save_tiny, save_tiny_ner

SENTENCE = "Dante was born in Florence."
QUESTION, CONTEXT = "Where was Dante born?", "Dante was born in Florence in 1265."


@pytest.fixture(scope="module")
def ner_dir(tmp_path_factory):
    return save_tiny_ner(tmp_path_factory.mktemp("ner"))


@pytest.fixture(scope="module")
def ner(ner_dir):
    return Session.open(str(ner_dir), device="cpu")


@pytest.fixture(scope="module")
def qa_dir(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("qa"), "BertForQuestionAnswering", seed=7)


@pytest.fixture(scope="module")
def qa(qa_dir):
    return Session.open(str(qa_dir), device="cpu")


def grad_x_input(model, encoding, output):
    """Σ_d e_d ∂f/∂e_d of `output(model outputs)` at each token, with the test's own autograd pass."""
    embeds = model.get_input_embeddings()(encoding["input_ids"]).detach().requires_grad_()
    value = output(model(inputs_embeds=embeds, token_type_ids=encoding["token_type_ids"]))
    (grad,) = torch.autograd.grad(value, embeds)
    return (grad * embeds).sum(-1)[0].detach().numpy(), float(value.detach())


def test_a_token_classifier_s_label_at_a_word_is_explained_by_its_own_gradient(ner):
    encoding = ner.tokenizer(SENTENCE, return_tensors="pt")
    position = encoding.word_ids(0).index(4)  # "florence": the word's first piece
    with torch.no_grad():
        predicted = int(ner.model(**encoding).logits[0, position].argmax())
    expected, value = grad_x_input(ner.model, encoding, lambda out: torch.log_softmax(out.logits[0, position], -1)[predicted])
    result = bertscope.attribute(ner, SENTENCE, method="gradient-x-input", word="Florence")
    assert result.target["label"] == NER_LABELS[predicted] and result.target["position"] == position
    assert result.target["word"] == 4 and result.output == pytest.approx(value, abs=1e-5)
    np.testing.assert_allclose(result.scores, expected, atol=1e-6)
    # another label, by name, at the same word by index: that label's log-probability
    other = next(name for name in NER_LABELS if name != NER_LABELS[predicted])
    chosen = bertscope.attribute(ner, SENTENCE, method="gradient-x-input", word=4, target=other)
    expected, _ = grad_x_input(ner.model, encoding, lambda out: torch.log_softmax(out.logits[0, position], -1)[NER_LABELS.index(other)])
    np.testing.assert_allclose(chosen.scores, expected, atol=1e-6)
    integrated = bertscope.attribute(ner, SENTENCE, word=4)
    assert integrated.completeness_error < 0.05


def test_a_qa_model_s_answer_span_is_explained_as_start_plus_end(qa):
    encoding = qa.tokenizer(QUESTION, CONTEXT, return_tensors="pt")
    with torch.no_grad():
        out = qa.model(**encoding)
    context = torch.tensor([s == 1 for s in encoding.sequence_ids(0)])
    start, end = out.start_logits[0].masked_fill(~context, -1e9), out.end_logits[0].masked_fill(~context, -1e9)
    spans = (start[:, None] + end[None, :]).triu().masked_fill(torch.ones(len(start), len(start)).tril(-1).bool(), -1e9)
    first, last = divmod(int(spans.argmax()), len(start))  # the tests' own best span (the context is under 30 tokens)

    def span(out):
        return torch.log_softmax(out.start_logits[0], -1)[first] + torch.log_softmax(out.end_logits[0], -1)[last]

    expected, value = grad_x_input(qa.model, encoding, span)
    result = bertscope.attribute(qa, QUESTION, pair=CONTEXT, method="gradient-x-input")
    assert (result.target["start"], result.target["end"], result.target["explained"]) == (first, last, "start+end")
    assert result.output == pytest.approx(value, abs=1e-5)
    np.testing.assert_allclose(result.scores, expected, atol=1e-6)
    ends, _ = grad_x_input(qa.model, encoding, lambda out: out.end_logits[0, last])
    only_end = bertscope.attribute(qa, QUESTION, pair=CONTEXT, method="gradient-x-input", target="end", score="logit")
    np.testing.assert_allclose(only_end.scores, ends, atol=1e-6)


def test_a_similarity_is_the_cosine_of_the_sides_encoded_apart(tiny_session):
    first, second = "The cat sat on the mat.", "A kitten was sitting on a rug."
    model, tokenizer = tiny_session.model, tiny_session.tokenizer
    sides = [tokenizer(text, return_tensors="pt") for text in (first, second)]
    embeds = [model.get_input_embeddings()(side["input_ids"]).detach().requires_grad_() for side in sides]
    pooled = [
        model.base_model(inputs_embeds=e, token_type_ids=s["token_type_ids"]).last_hidden_state.mean(1) for e, s in zip(embeds, sides)
    ]
    cosine = F.cosine_similarity(pooled[0], pooled[1])[0]  # no sentence-transformers files: mean pooling
    grads = torch.autograd.grad(cosine, embeds)
    expected = np.concatenate([(g * e).sum(-1)[0].detach().numpy() for g, e in zip(grads, embeds)])
    result = bertscope.attribute(tiny_session, first, pair=second, method="gradient-x-input", similarity=True)
    assert result.target["kind"] == "similarity" and result.score == "cosine"
    assert result.output == pytest.approx(float(cosine.detach()), abs=1e-5)
    assert len(result.tokens) == sum(len(side["input_ids"][0]) for side in sides)
    np.testing.assert_allclose(result.scores, expected, atol=1e-6)
    assert {word["word"] for word in result.words()} >= {"cat", "kitten"}
    rolled = bertscope.attribute(tiny_session, first, pair=second, method="attention-rollout", similarity=True)
    assert rolled.scores.sum() == pytest.approx(2.0, abs=1e-5)  # each side's pooled rows, each summing to 1


def test_patching_a_token_label_and_an_answer_measures_what_the_heads_compute(ner, qa):
    label = bertscope.patch(ner, SENTENCE, "Dante was born in Rome.", metric="label", classes=("B-LOC", "O"))
    encoding = ner.tokenizer(SENTENCE, return_tensors="pt")
    with torch.no_grad():
        logits = ner.model(**encoding).logits[0, 5]
    assert label.clean_metric == pytest.approx(float(logits[3] - logits[0]), abs=1e-5)
    assert "at word 4 (florence, position 5)" in label.metric_description
    last = ner.num_layers
    assert label.positions[last, 5] == pytest.approx(1.0) and np.abs(np.delete(label.positions[last], 5)).max() < 1e-6
    answer = bertscope.patch(qa, QUESTION, "When was Dante born?", pair=CONTEXT, corrupt_pair=CONTEXT, metric="answer")
    effects = answer.positions[qa.num_layers]  # start and end logits are position-wise: the span ends' positions carry it all
    assert effects.sum() == pytest.approx(1.0, abs=1e-2) and np.count_nonzero(np.abs(effects) > 1e-2) <= 4
    with pytest.raises(InputError, match="not a token classifier"):
        bertscope.patch(qa, QUESTION, "When was Dante born?", metric="label")


def test_bad_task_targets_are_one_line(run, ner_dir, qa_dir, tiny_bert_dir):
    ner, qa_model, plain = str(ner_dir), str(qa_dir), str(tiny_bert_dir)
    assert_one_line_error(run("attribute", SENTENCE, "-m", ner, "--word", "9"), "word 9 is out of range: the text has 6 words")
    assert_one_line_error(run("attribute", SENTENCE, "-m", ner, "--word", "Paris"), "no word 'Paris' in the text")
    assert_one_line_error(run("attribute", SENTENCE, "-m", ner, "--word", "1", "--target", "B-ORG"), "not a label of this token classifier")
    assert_one_line_error(run("attribute", SENTENCE, "-m", ner), "choose one by index (0 to 5)")
    assert_one_line_error(run("attribute", QUESTION, "-m", qa_model), "give the question as the text and the context as the pair")
    assert_one_line_error(run("attribute", QUESTION, "--pair", CONTEXT, "-m", qa_model, "--target", "middle"), "start, end")
    assert_one_line_error(run("attribute", SENTENCE, "-m", plain, "--similarity"), "give the second with --pair")
    assert_one_line_error(run("attribute", SENTENCE, "-m", plain, "--word", "1", "--probe", "subject_number"), "reads no word")
    assert_one_line_error(run("attribute", SENTENCE, "-m", qa_model, "--word", "1"), "BertForQuestionAnswering is not one")
    done = run("attribute", QUESTION, "--pair", CONTEXT, "-m", qa_model, "--method", "gradient", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["target"]["kind"] == "answer"
    assert_one_line_error(
        run("patch", SENTENCE, "--corrupt", "Dante was born in Rome.", "-m", plain, "--metric", "label"), "not a token classifier"
    )


@pytest.mark.parametrize("name", ["token-classification", "similarity"])
def test_ablation_s_metric_changes_are_the_metric_measured_with_each_head_or_layer_off(name, ner, tiny_session):
    from bertscope.analyses.importance.objectives import make_objective
    from bertscope.analyses.importance.run import ablation_importance, measure
    from tests.test_task_objectives import pair_sentences, tagged_sentences

    session, sentences = (ner, tagged_sentences()) if name == "token-classification" else (tiny_session, pair_sentences())
    objective = make_objective(session, name, sentences, batch_size=2)
    result = list(ablation_importance(objective))[-1].result
    changes = result.metric_changes
    baseline = measure(objective).metric
    for layer, head in [(0, 1), (2, 3)]:
        off = measure(objective, session.mask(f"{layer}:{head}")).metric
        assert changes.heads[layer, head] == pytest.approx(off - baseline, abs=1e-9)
    assert changes.layers[1] == pytest.approx(measure(objective, session.mask("1:*")).metric - baseline, abs=1e-9)
    raising = changes.raising_heads()
    assert [(layer, head) for layer, head, _ in raising] == [
        (int(layer), int(head)) for layer, head in sorted(zip(*np.nonzero(changes.heads > 1e-9)), key=lambda lh: -changes.heads[lh])
    ]


def test_the_heads_whose_removal_raises_the_metric_are_listed_in_the_json_and_the_table(run, tiny_bert_dir, tmp_path):
    from tests.test_task_objectives import PAIRS

    data = tmp_path / "pairs.tsv"
    data.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in PAIRS))
    done = run("importance", "-O", "similarity", "--data", str(data), "--method", "ablation", "-m", str(tiny_bert_dir), "--json")
    payload = json.loads(done.stdout)
    raised = payload["raises_metric"]
    changes = {(h["layer"], h["head"]): h["metric_change"] for h in payload["heads"]}
    assert [(h["layer"], h["head"]) for h in raised["heads"]] == sorted(
        (lh for lh, change in changes.items() if change > 1e-9), key=lambda lh: (-changes[lh], lh)
    )
    assert [entry["layer"] for entry in raised["layers"]] == sorted(
        (e["layer"] for e in payload["layers"] if e["metric_change"] > 1e-9), key=lambda layer: -payload["layers"][layer]["metric_change"]
    )
    printed = run("importance", "-O", "similarity", "--data", str(data), "--method", "ablation", "-m", str(tiny_bert_dir)).stdout
    if raised["heads"]:
        first = raised["heads"][0]
        assert f"switching off these heads raises Spearman's rho: {first['layer']}:{first['head']} (+" in " ".join(printed.split())
    else:
        assert "switching off no single head or layer raises Spearman's rho" in " ".join(printed.split())
