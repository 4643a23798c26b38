"""Two models side by side: attention cosine per head, CKA between their layers, probe differences, tokenizer check."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.geometry.compare import check_same_tokenizer, compare_models, probe_data
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence
from tests.helpers.models import save_tiny

SENTENCES = [
    Sentence(text)
    for text in (
        "The cat sat on the mat.",
        "A dog barked at the mail carrier this morning.",
        "She said that the report was finished.",
        "Rain fell all night over the quiet town.",
        "They will visit their grandparents next week.",
        "The committee approved it.",
        "Why?",
        "Seven hundred people came to the opening of the new library downtown.",
    )
]


def compared(a, b, sentences=SENTENCES, **options):
    steps = list(compare_models(a, b, sentences, **options))
    assert steps[-1].result is not None
    return steps[-1].result


@pytest.fixture(scope="module")
def other_session(tmp_path_factory):
    """The tiny BERT's architecture and tokenizer with other weights: a stand-in for a fine-tuned checkpoint."""
    from bertscope.model.session import Session

    return Session.open(str(save_tiny(tmp_path_factory.mktemp("tiny-b"), "BertModel", seed=5, initializer_range=0.5)), device="cpu")


def test_a_model_compared_with_itself_is_the_same_everywhere(tiny_session):
    result = compared(tiny_session, tiny_session, job=JobOptions(batch_size=3))
    assert result.head_cosine.shape == (3, 4)
    np.testing.assert_allclose(result.head_cosine, 1.0, atol=1e-5)
    np.testing.assert_allclose(result.head_cosine_std, 0.0, atol=1e-3)
    np.testing.assert_allclose(np.diagonal(result.cka), 1.0, atol=1e-6)
    np.testing.assert_allclose(result.cka, result.cka.T, atol=1e-9)
    assert result.sentences == len(SENTENCES)


def test_head_cosine_is_the_mean_over_sentences_of_each_maps_cosine(tiny_session, other_session):
    result = compared(tiny_session, other_session, job=JobOptions(batch_size=3))
    assert result.head_cosine.shape == (3, 4) and (result.head_cosine < 0.999).any()
    cosines = []
    for sentence in SENTENCES:
        a = tiny_session.forward(sentence.text, attentions=True).attentions
        b = other_session.forward(sentence.text, attentions=True).attentions
        flat_a, flat_b = a.reshape(*a.shape[:2], -1), b.reshape(*b.shape[:2], -1)
        cosines.append((flat_a * flat_b).sum(-1) / np.linalg.norm(flat_a, axis=-1) / np.linalg.norm(flat_b, axis=-1))
    np.testing.assert_allclose(result.head_cosine, np.mean(cosines, axis=0), atol=1e-5)
    np.testing.assert_allclose(result.head_cosine_std, np.std(cosines, axis=0), atol=1e-4)
    assert result.cka.shape == (4, 4) and not np.allclose(np.diagonal(result.cka), 1.0)
    payload = result.as_json()
    assert len(payload["heads"]) == 12 and set(payload["heads"][0]) == {"layer", "head", "attention_cosine", "std"}
    json.dumps(payload)


def test_models_of_different_depth_get_rectangular_cka_and_no_head_cosines(tiny_session, tmp_path):
    from bertscope.model.session import Session

    deeper = Session.open(str(save_tiny(tmp_path / "deeper", "BertModel", seed=2, num_hidden_layers=4)), device="cpu")
    result = compared(tiny_session, deeper)
    assert result.cka.shape == (4, 5) and result.head_cosine is None
    assert any("layouts" in note for note in result.notes)


def test_a_different_tokenizer_is_refused_in_one_line(tiny_session, tmp_path):
    from bertscope.model.session import Session

    directory = save_tiny(tmp_path / "other-vocab", "BertModel")
    tokenizer_file = directory / "tokenizer.json"
    spec = json.loads(tokenizer_file.read_text())
    spec["model"]["vocab"]["zzznew"] = spec["model"]["vocab"].pop("hello")
    tokenizer_file.write_text(json.dumps(spec))
    other = Session.open(str(directory), device="cpu")
    with pytest.raises(InputError, match="tokenizer differs") as error:
        check_same_tokenizer(tiny_session, other)
    assert "\n" not in str(error.value)


def test_probe_differences_per_layer(tiny_session, other_session):
    data = probe_data("sentence_length", None)[::20]  # a small slice of the built-in task, its splits kept
    result = compared(tiny_session, other_session, probes=[("sentence_length", data)], job=JobOptions(cache_dir=False))
    (probe,) = result.probes
    assert probe.task == "sentence_length" and probe.metric == "accuracy" and len(probe.a) == len(probe.b) == 4
    entry = probe.as_json()["layers"][2]
    assert entry["difference"] == pytest.approx(entry["b"] - entry["a"], abs=1e-5)
    with pytest.raises(InputError, match="CoNLL-U"):
        probe_data("upos", SENTENCES)
    with pytest.raises(InputError, match="unknown probe task"):
        probe_data("nonsense", SENTENCES)


def test_compare_can_be_cancelled(tiny_session):
    cancel = threading.Event()
    steps = compare_models(tiny_session, tiny_session, SENTENCES * 10, job=JobOptions(batch_size=2, cancel=cancel))
    next(steps)
    cancel.set()
    assert all(step.result is None for step in steps)
