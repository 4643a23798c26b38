"""`Backend.task_prediction` on tiny real models (model.task_heads), against the tests' own transformers passes: a token
classifier's label at each word's first piece, a QA model's best span, a sentence-embedding model's cosine; under a mask
as under the test's own hook zeroing that head."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from bertscope.model.session import Session
from bertscope.model.task_results import AnswerSpan, SegmentSimilarity, WordLabels
from bertscope.session_backend import SessionBackend
from tests.helpers.models import UPOS_TAGS, save_tiny
from tests.test_task_objectives import NER_LABELS, zeroed_head

WORDS = ["Dante", "was", "born", "in", "Florence", "yesterday"]


@pytest.fixture(scope="module")
def ner_backend(tmp_path_factory):
    labels = dict(enumerate(NER_LABELS))
    directory = save_tiny(tmp_path_factory.mktemp("ner"), "BertForTokenClassification", seed=3, num_labels=5, id2label=labels)
    return SessionBackend(Session.open(str(directory), device="cpu"))


def own_pass(session, *args, hook=None, **kwargs):
    """The model's output by transformers alone, with the test's hook zeroing one head if given."""
    handle = zeroed_head(session.model, *hook) if hook else None
    try:
        with torch.no_grad():
            return session.model(**session.tokenizer(*args, return_tensors="pt", **kwargs))
    finally:
        if handle is not None:
            handle.remove()


@pytest.mark.parametrize("head", [None, (1, 0)])
def test_word_labels_are_the_classifiers_argmax_at_each_words_first_piece(ner_backend, head):
    session = ner_backend.session
    encoding = ner_backend.encode(" ".join(WORDS))
    mask = session.mask(f"{head[0]}:{head[1]}") if head else None
    predicted = ner_backend.task_prediction(encoding, mask)
    tokens = session.tokenizer(WORDS, is_split_into_words=True)
    firsts = [tokens.word_ids().index(word) for word in range(len(WORDS))]
    probabilities = own_pass(session, WORDS, is_split_into_words=True, hook=head).logits[0].softmax(-1)[firsts]
    assert isinstance(predicted, WordLabels)
    assert predicted.words == tuple(word.lower() for word in WORDS)  # the bundled tokenizer lowercases
    assert predicted.positions == tuple(firsts)
    assert predicted.labels == tuple(NER_LABELS[i] for i in probabilities.argmax(-1).tolist())
    assert predicted.probabilities == pytest.approx(probabilities.max(-1).values.tolist(), abs=1e-5)


@pytest.mark.parametrize("head", [None, (0, 1)])
def test_the_answer_is_the_best_span_in_the_context(tmp_path_factory, head):
    directory = save_tiny(tmp_path_factory.mktemp("qa"), "BertForQuestionAnswering", seed=7)
    backend = SessionBackend(Session.open(str(directory), device="cpu"))
    question, context = "Where was Dante born?", "Dante Alighieri was born in Florence in 1265 and died in Ravenna."
    encoding = backend.encode(question, context)
    predicted = backend.task_prediction(encoding, backend.session.mask(f"{head[0]}:{head[1]}") if head else None)
    outputs = own_pass(backend.session, question, context, hook=head)
    start, end = outputs.start_logits[0].tolist(), outputs.end_logits[0].tolist()
    inside = [i for i, segment in enumerate(encoding.segment_ids) if segment == 1 and not encoding.special[i]]  # run_qa's context
    best = max((start[i] + end[j], i, j) for i in inside for j in inside if 0 <= j - i < 30)
    assert isinstance(predicted, AnswerSpan)
    assert (predicted.start, predicted.end) == best[1:] and predicted.score == pytest.approx(best[0], abs=1e-4)
    assert predicted.null_score == pytest.approx(start[0] + end[0], abs=1e-4)
    assert backend.task_prediction(backend.encode(question)) is None  # no context, no answer


def test_a_sentence_embedding_models_cosine_is_of_each_segment_pooled_alone(tmp_path):
    directory = save_tiny(tmp_path / "st", "BertModel", seed=5)
    (directory / "modules.json").write_text(
        json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])
    )  # fmt: skip
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    backend = SessionBackend(Session.open(str(directory), device="cpu"))
    assert backend.info.sentence_embedding
    first, second = "The cat sat on the mat.", "A cat was sitting on a very warm mat."
    for head in (None, (1, 0)):
        mask = backend.session.mask(f"{head[0]}:{head[1]}") if head else None
        predicted = backend.task_prediction(backend.encode(first, second), mask)
        cls = [own_pass(backend.session, text, hook=head).last_hidden_state[0, 0] for text in (first, second)]
        assert isinstance(predicted, SegmentSimilarity) and predicted.pooling.startswith("cls pooling")
        assert predicted.cosine == pytest.approx(float(F.cosine_similarity(*cls, dim=0)), abs=1e-5)
    assert backend.task_prediction(backend.encode(first)) is None  # one sentence: no cosine


def test_the_explorers_token_classification_reference_is_upos_for_a_tagger_else_the_models_own_labels(ner_backend, tmp_path):
    from bertscope.api import treebank

    sample = treebank(limit=4)
    sentences = list(sample.sentences)
    prepared = ner_backend.objective("token-classification", api_corpus(sentences, sample))
    assert prepared.metric.startswith("agreement") and prepared.notes[0].startswith("agreement")
    assert ner_backend.measure(prepared).metric == pytest.approx(1.0)  # the model agrees with itself unmasked
    labels = dict(enumerate(UPOS_TAGS))
    tagger = SessionBackend(
        Session.open(str(save_tiny(tmp_path, "BertForTokenClassification", num_labels=len(labels), id2label=labels)), device="cpu")
    )
    prepared = tagger.objective("token-classification", api_corpus(sentences, sample))
    assert prepared.notes[0] == "gold labels: the sample treebank's UPOS tags" and not prepared.metric.startswith("agreement")


def api_corpus(sentences, read):
    from bertscope.api import Corpus

    return Corpus(sentences, read.source, read.report)
